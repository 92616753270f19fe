"""Bidirectional identity replication through `srm run`: the provenance header keeps every record from coming back,
a topic created by replication is never replicated back to where it came from, and a topic replicated both ways
keeps its own configs on each side."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka import create_topic, numbered_records, produce, read_topic, record_count, unique, wait_for
from tests.support.runtime import SrmRun, wait_log, write_config
from tests.support.topics import topic_overrides

pytestmark = pytest.mark.e2e

IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def provenance_by_origin(bootstrap: str, topic: str) -> dict[str, set[bytes | None]]:
    """The srm-provenance header values of a topic's records, grouped by the tag of the cluster that produced them
    (``numbered_records`` values start with their tag)."""
    out: dict[str, set[bytes | None]] = {}
    for records in read_topic(bootstrap, topic).values():
        for r in records:
            origin = (r.value or b"").decode().split("-v")[0].rsplit("-", 1)[-1]
            out.setdefault(origin, set()).add(dict(r.headers).get("srm-provenance"))
    return out


def test_bidirectional_identity_replication_with_provenance_header_no_record_loops(clusters, tmp_path: Path):
    # GIVEN <p>.shared on both clusters (active-active), <p>.west on a only, and identity flows a->b and b->a that
    # both select <p>.* (a regex: the configuration check cannot see the overlap, the runtime guards must)
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("aa")
    shared, west = f"{p}.shared", f"{p}.west"
    create_topic(a, shared, 1, {"retention.ms": "86400000"})
    create_topic(b, shared, 1, {"retention.ms": "172800000"})
    create_topic(a, west, 1, {"retention.ms": "259200000"})
    produce(a, shared, numbered_records(50, 1, f"{p}-a"))
    produce(b, shared, numbered_records(30, 1, f"{p}-b"))
    produce(a, west, numbered_records(20, 1, f"{p}-a"))
    flow = {"topics": f"{p}\\..*", "replication.policy.class": IDENTITY}
    config = write_config(
        tmp_path / "srm.yaml",
        {"a": a, "b": b},
        {"a->b": flow, "b->a": flow},
        **{"sync.topic.configs.interval.seconds": 1},
    )

    with SrmRun(config, tmp_path) as run:
        # WHEN both flows run, and more records arrive on both sides once replication is under way
        wait_for(lambda: record_count(b, shared) == 80, timeout=120, message=f"{shared} on b: 30 own + 50 from a")
        wait_for(lambda: record_count(a, shared) == 80, timeout=120, message=f"{shared} on a: 50 own + 30 from b")
        produce(a, shared, numbered_records(10, 1, f"{p}-a", start=50))
        produce(b, shared, numbered_records(10, 1, f"{p}-b", start=30))
        wait_for(lambda: record_count(b, shared) == 100, timeout=60, message=f"{shared} on b: 100")
        wait_for(lambda: record_count(a, shared) == 100, timeout=60, message=f"{shared} on a: 100")
        wait_for(lambda: record_count(b, west) == 20, timeout=60, message=f"{west} replicated to b")
        wait_log(run, f"not replicating {west} on b was created by replication from a", timeout=60)
        time.sleep(5)  # five refresh intervals: time for a loop to show, if there were one
        assert run.alive(), run.output()[-2000:]

        # THEN every record is on each cluster exactly once: nothing came back
        assert record_count(a, shared) == record_count(b, shared) == 100
        assert record_count(a, west) == record_count(b, west) == 20

    # AND replicated records carry the clusters they came from; local ones carry no header
    assert provenance_by_origin(b, shared) == {"a": {b"a"}, "b": {None}}
    assert provenance_by_origin(a, shared) == {"a": {None}, "b": {b"b"}}
    assert provenance_by_origin(b, west) == {"a": {b"a"}}
    # AND the active-active topic keeps each side's own configs; the one-way topic's configs followed it
    assert topic_overrides(a, shared) == {"retention.ms": "86400000"}
    assert topic_overrides(b, shared) == {"retention.ms": "172800000"}
    assert topic_overrides(b, west) == {"retention.ms": "259200000"}
