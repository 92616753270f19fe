"""Replication topologies through `srm run`: multi-hop chains, bidirectional pairs, the identity policy."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from srm.core.loops import PROVENANCE_HEADER
from tests.support.kafka import (
    assert_identical,
    create_topic,
    list_topic_names,
    numbered_records,
    produce,
    read_topic,
    record_count,
    unique,
    wait_replicated,
)
from tests.support.runtime import SrmRun, write_config

pytestmark = pytest.mark.e2e

IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def _remote_names(bootstrap: str, prefix: str) -> set[str]:
    """Data topics named ``<prefix>…``: MM2's bookkeeping (``<alias>.heartbeats``, ``<alias>.checkpoints.internal``)
    aside."""
    bookkeeping = {f"{prefix}heartbeats", f"{prefix}checkpoints.internal"}
    return {t for t in list_topic_names(bootstrap) if t.startswith(prefix) and t not in bookkeeping}


def test_chain_a_to_b_to_c_default_policy_nests_prefixes_identically(clusters, tmp_path: Path):
    # GIVEN topic <p>.x on a, a flow a->b selecting it and a flow b->c selecting what came from a
    a, b, c = (clusters[n].bootstrap for n in "abc")
    p = unique("hop")
    topic = f"{p}.x"
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(200, 2, p))
    config = write_config(
        tmp_path / "srm.yaml",
        {"a": a, "b": b, "c": c},
        {"a->b": {"topics": f"{p}\\..*"}, "b->c": {"topics": f"a\\.{p}\\..*"}},
    )

    # WHEN one srm run runs both flows
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, c, f"b.a.{topic}", timeout=120)
        assert run.alive(), run.output()[-2000:]

    # THEN a.<topic> on b and b.a.<topic> on c equal the source, record by record
    assert assert_identical(a, topic, b, f"a.{topic}") == {0: 100, 1: 100}
    assert assert_identical(a, topic, c, f"b.a.{topic}") == {0: 100, 1: 100}
    assert f"a.{topic}" not in list_topic_names(c)  # c only hears of a through b


def test_bidirectional_pair_with_match_all_filters_replicates_each_way_without_loops(fresh_clusters, tmp_path: Path):
    # GIVEN t1 on a, t2 on b and flows a->b and b->a both selecting every topic
    a, b = fresh_clusters["a"].bootstrap, fresh_clusters["b"].bootstrap
    create_topic(a, "t1", 2)
    create_topic(b, "t2", 1)
    produce(a, "t1", numbered_records(120, 2, "t1"))
    produce(b, "t2", numbered_records(80, 1, "t2"))
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": ".*"}, "b->a": {"topics": ".*"}})

    with SrmRun(config, tmp_path) as run:
        # WHEN both flows replicate, and more records arrive once the remote topics exist
        wait_replicated(a, "t1", b, "a.t1", timeout=120)
        wait_replicated(b, "t2", a, "b.t2", timeout=120)
        produce(a, "t1", numbered_records(40, 2, "t1", start=120))
        produce(b, "t2", numbered_records(40, 1, "t2", start=80))
        wait_replicated(a, "t1", b, "a.t1", timeout=60)
        wait_replicated(b, "t2", a, "b.t2", timeout=60)
        time.sleep(5)  # five refresh.topics.interval.seconds: time for a loop to show, if there were one
        assert run.alive(), run.output()[-2000:]

    # THEN each side has exactly the other's topic, nothing came back, and the counts equal the sources'
    assert _remote_names(b, "a.") == {"a.t1"}
    assert _remote_names(a, "b.") == {"b.t2"}
    assert "b.a.t1" not in list_topic_names(a)
    assert "a.b.t2" not in list_topic_names(b)
    assert record_count(a, "t1") == record_count(b, "a.t1") == 160
    assert record_count(b, "t2") == record_count(a, "b.t2") == 120
    assert_identical(a, "t1", b, "a.t1")
    assert_identical(b, "t2", a, "b.t2")


def test_identity_policy_one_way_keeps_topic_name_identically(clusters, tmp_path: Path):
    # GIVEN a topic on a and a flow a->b with MM2's IdentityReplicationPolicy
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("ident")
    create_topic(a, topic, 3)
    produce(a, topic, numbered_records(240, 3, topic))
    config = write_config(
        tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic, "replication.policy.class": IDENTITY}}
    )

    # WHEN srm run replicates it
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, topic, timeout=120)
        assert run.alive(), run.output()[-2000:]

    # THEN the remote topic has the source's name (no prefix) and equals it record by record, except for the
    # srm-provenance header the identity policy appends (srm.core.loops: the name cannot tell where a record came from)
    src, dst = read_topic(a, topic), read_topic(b, topic)
    assert sorted(dst) == [0, 1, 2]
    for p, records in src.items():
        assert len(records) == 80
        assert [r.headers[-1] for r in dst[p]] == [(PROVENANCE_HEADER, b"a")] * 80
        assert [replace(r, headers=r.headers[:-1]).content() for r in dst[p]] == [r.content() for r in records]
    assert f"a.{topic}" not in list_topic_names(b)
