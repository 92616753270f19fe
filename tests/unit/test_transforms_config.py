"""Single Message Transforms in srm's configuration: Connect's keys at every level of the hierarchy, key by key; known
keys (no warning); errors naming key and file:line; connector definitions; ``srm check`` and ``srm-control`` showing
each flow's chain."""

from __future__ import annotations

from pathlib import Path

from srm.config.connectors import load_connectors
from srm.control.check import check
from tests.unit.config_files import BASE, config_error, load
from tests.unit.test_connectors import COMMON, kafka_connector, rest_body

CONNECT = "org.apache.kafka.connect.transforms."
TOMBSTONES = (
    "predicates = tomb",
    f"predicates.tomb.type = {CONNECT}predicates.RecordIsTombstone",
    "transforms.drop.type = Filter",
    "transforms.drop.predicate = tomb",
)


def test_keys_resolve_per_key_flow_over_cluster_over_global_and_warn_nothing():
    # GIVEN a global chain, a stage's header changed for every flow into b, and the list changed for a->b
    config = load(
        {**BASE, "clusters": "a, b, c", "c.bootstrap.servers": "c:9092", "c->b.enabled": "true", "a->c.enabled": "1"},
        *TOMBSTONES,
        "transforms = drop",
        "transforms.stamp.type = InsertHeader",
        "transforms.stamp.header = origin",
        "transforms.stamp.value.literal = global",
        "b.transforms.stamp.value.literal = into-b",
        "a->b.transforms = stamp, drop",
    )
    # THEN each flow's chain takes each key from the most specific level that sets it
    assert config.transforms("a", "b").describe() == [
        "stamp: InsertHeader origin=into-b",
        "drop: Filter if tomb (RecordIsTombstone)",
    ]
    assert config.transforms("c", "b").describe() == ["drop: Filter if tomb (RecordIsTombstone)"]
    assert len(config.transforms("a", "c")) == 1
    assert config.warnings == ()


def test_no_transforms_configured_is_an_empty_chain():
    assert not load(BASE).transforms("a", "b")


def test_a_bad_chain_fails_the_configuration_naming_key_and_line():
    e = config_error(
        BASE, "a->b.transforms = drop", "a->b.transforms.drop.type = Filter", "transforms.drop.predicate = p"
    )
    assert str(e).startswith("mm2.properties:7: transforms.drop.predicate: no predicate 'p'")
    assert e.key == "transforms.drop.predicate"


def test_an_unknown_class_fails_the_configuration_naming_the_built_ins():
    e = config_error(BASE, "a->b.transforms = x", "a->b.transforms.x.type = com.example.Mask")
    assert "mm2.properties:6: a->b.transforms.x.type: unknown class com.example.Mask" in str(e)
    assert "built in: Filter, InsertHeader, DropHeaders" in str(e)


def test_srm_check_shows_each_flows_chain():
    config = load(BASE, *TOMBSTONES, "a->b.transforms = drop")
    report = check(config)
    at = report.lines.index("  transforms: 1")
    assert report.lines[at + 1] == "    drop: Filter if tomb (RecordIsTombstone)"


def test_srm_check_says_none_without_transforms():
    assert "  transforms: none" in check(load(BASE)).lines


def test_source_connectors_transforms_become_the_flows_the_others_are_left_out(tmp_path: Path):
    # GIVEN a source connector with Connect's transform keys, and a checkpoint connector with transforms of its own
    transforms = {
        "transforms": "dropTombstones, origin",
        "transforms.dropTombstones.type": CONNECT + "Filter",
        "transforms.dropTombstones.predicate": "isTombstone",
        "transforms.origin.type": CONNECT + "InsertHeader",
        "transforms.origin.header": "origin",
        "transforms.origin.value.literal": "us-west",
        "predicates": "isTombstone",
        "predicates.isTombstone.type": CONNECT + "predicates.RecordIsTombstone",
    }
    kafka_connector(tmp_path / "source.yaml", "source", "MirrorSourceConnector", {**COMMON, **transforms})
    rest_body(
        tmp_path / "checkpoint.json",
        "checkpoint",
        "MirrorCheckpointConnector",
        {**COMMON, "transforms": "x", "transforms.x.type": CONNECT + "RegexRouter"},
    )
    # WHEN the folder is read
    config = load_connectors(tmp_path)
    # THEN the flow's chain is the source connector's, and the checkpoint connector's router is no error
    assert config.transforms("us-west", "us-east").describe() == [
        "dropTombstones: Filter if isTombstone (RecordIsTombstone)",
        "origin: InsertHeader origin=us-west",
    ]
    assert config.warnings == ()
