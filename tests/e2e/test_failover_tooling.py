"""Failover tooling: `srm-control offsets` and the RemoteClusterUtils-like Python API, against a running flow."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from srm.mm2 import client as remote_cluster
from tests.e2e.test_failover import FAST, committed_on, consume_and_commit, produce_values, wait_group_synced
from tests.support.clusters import running_clusters
from tests.support.kafka import create_topic, unique, wait_for, wait_replicated
from tests.support.runtime import group_offsets, srm_run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def failed_over(tmp_path_factory: pytest.TempPathFactory):
    """A running a->b flow on two clusters of its own, a group `app` that consumed part of a topic on a, and its
    offsets synced to b: set up once for the module's tests, which only read it."""
    tmp_path = tmp_path_factory.mktemp("failed-over")
    with running_clusters(tmp_path / "kafka", ("a", "b")) as clusters:
        yield from _failed_over(clusters, tmp_path)


def _failed_over(clusters, tmp_path: Path):
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group, other = unique("orders"), unique("app"), unique("misc")
    create_topic(a, topic, 2)
    create_topic(a, other, 1)
    produce_values(a, topic, 0, [f"a{i}".encode() for i in range(40)])
    produce_values(a, topic, 1, [f"b{i}".encode() for i in range(40)])
    produce_values(a, other, 0, [b"x"] * 5)
    consume_and_commit(a, group, topic, {0: 12, 1: 30})
    lonely = unique("lonely")
    consume_and_commit(a, lonely, other, {0: 3})  # a group only on a topic the flow does not replicate
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": topic}}, **FAST) as run:
        wait_replicated(a, topic, b, f"a.{topic}")
        wait_group_synced(b, group, f"a.{topic}", 2)
        yield {"a": a, "b": b, "topic": topic, "group": group, "lonely": lonely, "cwd": tmp_path, "run": run}


def test_offsets_command_prints_and_exports_what_the_group_resumes_from(failed_over):
    f = failed_over
    # WHEN an operator asks where the group resumes on b
    shown = group_offsets(f["cwd"], f["group"])
    exported = group_offsets(f["cwd"], f["group"], "--export")

    # THEN both name the remote partitions and the exact offsets (here: no gaps, so equal to the source's)
    assert shown.returncode == 0, shown.stderr
    remote = f"a.{f['topic']}"
    assert f"{remote}" in shown.stdout and "12" in shown.stdout and "30" in shown.stdout
    assert shown.stdout.count("srm (exact)") == 2, shown.stdout  # srm's own checkpoints, not another writer's
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f"{remote},0,12", f"{remote},1,30"]
    # and they are what the checkpoint function committed to the idle group on b
    assert committed_on(f["b"], f["group"], remote, 2) == {0: 12, 1: 30}


def test_offsets_command_writes_csv_file_for_kafka_consumer_groups(failed_over):
    f = failed_over
    out = f["cwd"] / "offsets.csv"
    result = group_offsets(f["cwd"], f["group"], "--export", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "--reset-offsets --from-file" in result.stdout
    assert out.read_text() == f"a.{f['topic']},0,12\na.{f['topic']},1,30\n"


def test_offsets_command_unknown_group_alias_or_unreplicated_topics_answer_clearly(failed_over):
    f = failed_over

    unknown_group = group_offsets(f["cwd"], "nobody-ever")
    assert unknown_group.returncode == 1
    assert unknown_group.stderr.strip() == "srm-control: group nobody-ever has no committed offsets on a"

    unknown_alias = group_offsets(f["cwd"], f["group"], target="z")
    assert unknown_alias.returncode == 2
    assert "unknown cluster alias 'z'" in unknown_alias.stderr and len(unknown_alias.stderr.splitlines()) == 1

    lonely = group_offsets(f["cwd"], f["lonely"])
    assert lonely.returncode == 1
    assert "only on topics a->b does not replicate" in lonely.stderr
    for result in (unknown_group, unknown_alias, lonely):
        assert "Traceback" not in result.stderr


def test_remote_cluster_api_reads_checkpoints_and_heartbeats_like_mm2_client(failed_over):
    f = failed_over
    config = {"bootstrap.servers": f["b"]}
    remote = f"a.{f['topic']}"

    assert remote_cluster.translate_offsets(config, "a", f["group"]) == {
        TopicPartition(remote, 0): 12,
        TopicPartition(remote, 1): 30,
    }
    assert remote_cluster.checkpoint_topics(config) == {"a.checkpoints.internal"}
    wait_for(lambda: "a.heartbeats" in remote_cluster.heartbeat_topics(config), 30, message="heartbeats on b")
    assert remote_cluster.upstream_clusters(config) == {"a"}
    assert remote_cluster.replication_hops(config, "a") == 1
    assert remote_cluster.replication_hops(config, "c") == -1
    with pytest.raises(LookupError):
        remote_cluster.translate_offsets(config, "c", f["group"])
