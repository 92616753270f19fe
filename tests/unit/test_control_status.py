"""``status`` with the clusters stubbed (fake_clusters.py; the real probe runs in tests/e2e/test_control.py), and the
export formats."""

from __future__ import annotations

import io
import json
import re

import pytest

import srm.cli.control as cli
from srm.config.export import format_properties, format_yaml
from srm.config.parsing import parse_properties_text, parse_yaml_text
from srm.config.secrets import mask_secrets
from srm.control.edits import Control
from srm.state import EventSourceMappingRecord, StateStore, TopicMappingRecord
from tests.unit.fake_clusters import FakeProbe


def test_status_before_any_topic_sync_asks_the_source_and_reports_an_unreachable_cluster(
    control: Control, state: StateStore
):
    statuses = {s.name: s for s in control.status(FakeProbe(), state)}

    ab = statuses["a->b"]
    assert [(t.topic, t.remote, t.partitions, t.lag) for t in ab.topics or ()] == [
        ("p.one", "a.p.one", 2, 5),
        ("p.two", "a.p.two", 1, 0),
    ]
    assert (ab.enabled, ab.lag, ab.last_heartbeat_ms, ab.last_checkpoint_ms) == (True, 5, 1_700_000_000_000, None)
    assert ab.errors == ()

    assert ab.topics_from == "source"

    ba = statuses["b->a"]
    assert (ba.enabled, ba.topics, ba.lag) == (False, None, None)
    assert ba.errors[0] == "source b: cannot list topics: timed out"
    assert ba.to_dict()["topicCount"] is None and ab.to_dict()["lastHeartbeat"] == "2023-11-14T22:13:20Z"


def test_status_takes_topics_still_selected_and_times_from_the_state_table(control: Control, state: StateStore):
    # GIVEN a topic sync recorded two topics (one since deselected) and the functions recorded their facts
    state.put_topic_mapping("a", "b", TopicMappingRecord("p.one", "a.p.one", 2))
    state.put_topic_mapping("a", "b", TopicMappingRecord("gone", "a.gone", 1))
    state.update_flow_status("a", "b", heartbeat_ms=1_000, heartbeat_latency_ms=40, last_checkpoint_ms=2_000)

    # WHEN / THEN the status uses them, and the source is asked only for the lag
    [ab] = control.status(FakeProbe(), state, [("a", "b")])
    assert ab.topics_from == "state"
    assert [(t.topic, t.partitions, t.lag) for t in ab.topics or ()] == [("p.one", 2, 5)]
    assert (ab.last_heartbeat_ms, ab.heartbeat_latency_ms, ab.last_checkpoint_ms) == (1_000, 40, 2_000)


def test_status_command_prints_a_table_and_json(control: Control, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cli, "KafkaStatusProbe", lambda *a, **k: FakeProbe())
    out = io.StringIO()
    assert cli.main(["status", "--topics"], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    header = ["FLOW", "ENABLED", "TOPICS", "LAG", "OLDEST", "UNREPLICATED", "LAST", "HEARTBEAT", "LATENCY", "LAST"]
    assert text.splitlines()[0].split()[:10] == header
    # the fake's oldest unreplicated record of p.one is from 2023: days old
    assert re.search(r"a->b +yes +2 +5 +\d+d ago ", text) and "b->a: source b: cannot list topics: timed out" in text
    assert re.search(r"\n  p\.one +a\.p\.one +2 +5 +\d+d ago\n", text)
    assert re.search(r"\n  p\.two +a\.p\.two +1 +0 +-\n", text)

    out = io.StringIO()
    assert cli.main(["status", "--json", "--source", "a", "--target", "b"], out=out, err=io.StringIO()) == 0
    [ab] = json.loads(out.getvalue())
    assert (ab["flow"], ab["topicCount"], ab["lag"]) == ("a->b", 2, 5)
    assert ab["oldestUnreplicated"] == "2023-11-14T22:13:20Z"
    assert [t["oldestUnreplicated"] for t in ab["topics"]] == ["2023-11-14T22:13:20Z", None]


TRICKY = {
    "clusters": "a, b",
    "a.bootstrap.servers": "h:1,h:2",
    "a->b.topics": r"orders\..*, pay(ments)?",
    "a->b.topics.exclude": "",
    "b.ssl.truststore.location": "/etc/ssl/ca bundle.pem",
    "b.client.id": "#not-a-comment!",
    "weird key:with=specials": "x",
    "unicode.value": "Zürich → Tōkyō",
    "multi.line": "first\nsecond\tthird",
    "trailing.backslash": "c:\\dir\\",
    "enabled.like": "true",
    "number.like": "007",
    "float.like": "0.5",
}


@pytest.mark.parametrize("fmt", ["properties", "yaml"])
def test_export_formats_read_back_to_the_same_property_map(fmt: str):
    text = format_properties(TRICKY, ("a", "b")) if fmt == "properties" else format_yaml(TRICKY, ("a", "b"))
    parsed = parse_properties_text(text) if fmt == "properties" else parse_yaml_text(text)
    assert dict(parsed) == TRICKY


def test_mask_secrets_masks_literals_and_keeps_references():
    masked = mask_secrets({"a.sasl.jaas.config": "x", "b.sasl.password": "${env:P}", "a.ssl.key.password": ""})
    assert masked == {"a.sasl.jaas.config": "********", "b.sasl.password": "${env:P}", "a.ssl.key.password": ""}


def test_status_names_mappings_lambda_reports_a_problem_of(
    control: Control, state: StateStore, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN topic sync recorded one mapping Lambda cannot authenticate and one that is fine
    sasl = "PROBLEM: SASL authentication failed."
    state.put_event_source_mapping("a", "b", EventSourceMappingRecord("p.one", "u-1", True, 100, 0, 1_000, sasl))
    state.put_event_source_mapping("a", "b", EventSourceMappingRecord("p.two", "u-2", True, 100, 0, 1_000))
    monkeypatch.setattr(cli, "KafkaStatusProbe", lambda *a, **k: FakeProbe())
    # WHEN status is asked THEN the text names the topic, the mapping and Lambda's words
    out = io.StringIO()
    assert cli.main(["status", "--source", "a", "--target", "b"], out=out, err=io.StringIO()) == 0
    lines = [line for line in out.getvalue().splitlines() if "MAPPING PROBLEM" in line]
    assert len(lines) == 1 and lines[0].startswith("a->b: MAPPING PROBLEM p.one (event source mapping u-1, ")
    assert lines[0].endswith(f": {sasl}")
    # AND the JSON lists it
    out = io.StringIO()
    assert cli.main(["status", "--json", "--source", "a", "--target", "b"], out=out, err=io.StringIO()) == 0
    [ab] = json.loads(out.getvalue())
    assert ab["mappingProblems"] == [
        {"topic": "p.one", "mapping": "u-1", "problem": sasl, "since": "1970-01-01T00:00:01Z"}
    ]
