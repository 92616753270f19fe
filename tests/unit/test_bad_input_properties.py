"""Property-based tests of what srm reads from outside: the MSK event and the configuration. On random and mutated
input the answer is a parse or one clear error (an SrmError with a one-line message), never another exception, and a
valid event's every record reaches the parsed batches."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srm.config.parsing import Properties, parse_config_bytes, parse_properties_text, parse_yaml_text
from srm.config.settings import SETTING_KEYS, SrmConfig
from srm.core.events import EventBuilder, MalformedEventError, parse_event
from srm.errors import SrmError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz.-_0123456789", min_size=1, max_size=12)
payloads = st.none() | st.binary(max_size=40)
headers = st.none() | st.lists(st.tuples(st.text(max_size=6), payloads), max_size=3)


@st.composite
def valid_events(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, int, int, int, Any, Any, Any]]]:
    """An event as the event source builds it (through JSON), and the records in it."""
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/x", "127.0.0.1:9092", 6 * 1024 * 1024)
    records = []
    for topic, partition in draw(
        st.lists(st.tuples(topics, st.integers(0, 1000)), min_size=1, max_size=3, unique=True)
    ):
        offset = draw(st.integers(0, 2**40))
        for _ in range(draw(st.integers(1, 5))):
            offset += draw(st.integers(1, 3))
            timestamp = draw(st.integers(0, 2**42))
            key, value, hdrs = draw(payloads), draw(payloads), draw(headers)
            builder.add(topic, partition, offset, timestamp, "CREATE_TIME", key, value, hdrs, 0)
            records.append((topic, partition, offset, timestamp, key, value, hdrs or None))
    return json.loads(builder.to_bytes()), records


def assert_one_line(error: SrmError) -> None:
    message = str(error)
    assert message and "\n" not in message, message


@SETTINGS
@given(valid_events())
def test_every_record_of_a_valid_event_is_in_the_parsed_batches(case):
    event, records = case
    _, batches = parse_event(event)
    parsed = [
        (b.topic, b.partition, o, t, k, v, h)
        for b in batches
        for o, t, k, v, h in zip(b.offsets, b.timestamps, b.keys, b.values, b.headers, strict=True)
    ]
    assert sorted(parsed, key=repr) == sorted(records, key=repr)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*path, i))
    return found


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with a few parts replaced by random JSON, removed, or duplicated."""
    event = copy.deepcopy(draw(valid_events())[0])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(event)))
        if not path:
            event = draw(json_values)
            break
        parent = event
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "remove", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[draw(st.text(max_size=6))] = copy.deepcopy(parent[path[-1]])
    return event


@SETTINGS
@given(st.one_of(json_values, mutated_events()))
def test_a_random_or_mutated_event_parses_whole_or_fails_with_one_clear_error(event):
    try:
        _, batches = parse_event(event)
    except MalformedEventError as e:
        assert_one_line(e)
        return
    # parsed: nothing left out — one parsed record per record object of the event
    assert sum(map(len, batches)) == sum(len(group) for group in event["records"].values())


VALID_YAML = """\
clusters:
  west: {bootstrap.servers: "w:9092"}
  east: {bootstrap.servers: "e:9092"}
flows:
  west->east:
    enabled: true
    topics: "orders.*"
    errors.tolerance: all
replication.factor: 3
"""


@SETTINGS
@given(st.data())
def test_a_mutated_yaml_config_loads_or_fails_with_one_clear_error(data):
    text = VALID_YAML
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        action = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        chunk = data.draw(st.text(alphabet=st.sampled_from(list(":{}[]-,.>\"'#&*!|\n\t aZ9\\%@")), max_size=4))
        if action == "insert":
            text = text[:at] + chunk + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + len(chunk) + 1 :]
        else:
            text = text[:at] + chunk + text[at + len(chunk) :]
    try:
        SrmConfig.from_properties(parse_yaml_text(text, "srm.yaml"))
    except SrmError as e:
        assert_one_line(e)


@SETTINGS
@given(st.text(max_size=300))
def test_random_properties_text_loads_or_fails_with_one_clear_error(text):
    try:
        SrmConfig.from_properties(parse_properties_text(text, "mm2.properties"))
    except SrmError as e:
        assert_one_line(e)


VALID_PROPERTIES = """\
# café: a comment in UTF-8
clusters = west, east
west.bootstrap.servers = w:9092
east.bootstrap.servers = [::1]:9092
east.security.protocol = SASL_SSL
east.sasl.mechanism = SCRAM-SHA-512
east.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";
west->east.enabled = true
west->east.topics = orders.*
tasks.max = 2
"""
BYTES_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
names = st.sampled_from(["srm.yaml", "mm2.properties"])


def load_bytes_or_fail_clearly(data: bytes, name: str) -> None:
    """What load_file does with a file's bytes: a config, or one clear SrmError (the config table stores strings)."""
    try:
        SrmConfig.from_properties(parse_config_bytes(data, name))
    except SrmError as e:
        assert_one_line(e)


@BYTES_SETTINGS
@given(st.binary(max_size=300), names)
def test_random_bytes_load_or_fail_with_one_clear_error(data, name):
    load_bytes_or_fail_clearly(data, name)


@BYTES_SETTINGS
@given(st.data(), st.sampled_from([(VALID_YAML, "srm.yaml"), (VALID_PROPERTIES, "mm2.properties")]))
def test_a_byte_mutated_config_file_loads_or_fails_with_one_clear_error(data, valid):
    text, name = valid
    content = bytearray(text.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(content)))
        chunk = data.draw(st.binary(min_size=1, max_size=3))
        action = data.draw(st.sampled_from(["insert", "delete", "replace", "flip"]))
        if action == "insert":
            content[at:at] = chunk
        elif action == "delete":
            del content[at : at + len(chunk)]
        elif action == "replace":
            content[at : at + len(chunk)] = chunk
        elif at < len(content):
            content[at] ^= 1 << data.draw(st.integers(0, 7))
    load_bytes_or_fail_clearly(bytes(content), name)


keys = st.sampled_from(sorted(SETTING_KEYS)).flatmap(
    lambda key: st.sampled_from([key, f"a.{key}", f"a->b.{key}", f"b->a.{key}", f"x.{key}", f"a->a.{key}"])
)


@SETTINGS
@given(st.dictionaries(keys | st.text(max_size=12), st.text(max_size=12) | st.integers().map(str), max_size=6))
def test_random_settings_load_or_fail_with_one_clear_error(settings_map):
    props = {"clusters": "a, b", "a.bootstrap.servers": "a:9092", "b.bootstrap.servers": "b:9092", **settings_map}
    try:
        config = SrmConfig.from_properties(Properties.of(props))
    except SrmError as e:
        assert_one_line(e)
        return
    for flow in config.flows:
        config.settings(*flow)


@pytest.mark.parametrize("value", ["ALL", " all ", "None"])
def test_errors_tolerance_reads_as_connect_does(value):
    props = {"clusters": "a, b", "a.bootstrap.servers": "a:1", "b.bootstrap.servers": "b:1", "errors.tolerance": value}
    assert SrmConfig.from_properties(Properties.of(props)).settings("a", "b").errors_tolerance == value.strip().lower()


def test_errors_tolerance_outside_none_and_all_is_refused_naming_the_key():
    props = {
        "clusters": "a, b",
        "a.bootstrap.servers": "a:1",
        "b.bootstrap.servers": "b:1",
        "a->b.errors.tolerance": "x",
    }
    with pytest.raises(SrmError, match=r"a->b\.errors\.tolerance='x'"):
        SrmConfig.from_properties(Properties.of(props))
