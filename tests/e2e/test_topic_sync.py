"""Topic sync through `srm run`: a topic created while running gets its remote topic with the same partitions and
configs; partitions and config changes follow; excluded configs never do; the state table maps the topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kafka import create_partitions, create_topic, topic_partitions, unique, wait_for
from tests.support.runtime import srm_run, wait_log
from tests.support.state import state_store
from tests.support.topics import alter_topic, topic_overrides

pytestmark = pytest.mark.e2e


def test_topic_created_while_running_gets_partitions_and_configs_and_follows_changes(clusters, tmp_path: Path):
    # GIVEN srm run with a flow a->b whose filter matches no topic yet, configs synced every second
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("cfg")
    topic, remote = f"{p}.orders", f"a.{p}.orders"
    configs_synced = {"sync.topic.configs.interval.seconds": 1}
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": f"{p}\\..*"}}, **configs_synced) as run:
        wait_log(run, "a->b: worker started", timeout=60)

        # WHEN a matching topic with explicit configs appears, one of them excluded by config.properties.exclude
        create_topic(
            a,
            topic,
            2,
            {
                "retention.ms": "3600000",
                "cleanup.policy": "compact",
                "max.message.bytes": "200000",
                "min.insync.replicas": "1",
            },
        )

        # THEN the remote topic appears with 2 partitions and the configs, but not the excluded one
        wait_for(lambda: topic_partitions(b, remote) == 2, timeout=60, message=f"{remote} with 2 partitions")
        want = {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "200000"}
        assert topic_overrides(b, remote) == want

        # WHEN partitions are added, retention.ms changes, max.message.bytes is removed, an excluded config changes
        create_partitions(a, topic, 3)
        alter_topic(a, topic, {"retention.ms": "7200000", "min.insync.replicas": "2"}, delete=("max.message.bytes",))

        # THEN all but the excluded config follow: 3 partitions, the new retention, max.message.bytes reset
        wait_for(lambda: topic_partitions(b, remote) == 3, timeout=60, message=f"{remote} grown to 3")
        want = {"retention.ms": "7200000", "cleanup.policy": "compact"}
        wait_for(lambda: topic_overrides(b, remote) == want, timeout=60, message=f"{remote} configs {want}")

        # AND the state table maps the topic to its remote topic, with what srm set on it
        state = state_store(tmp_path)
        wait_for(lambda: state.topic_mappings("a", "b").get(topic, None) is not None, timeout=30, message="mapping")
        wait_for(lambda: state.topic_mappings("a", "b")[topic].partitions == 3, timeout=30, message="3 partitions")
        mapping = state.topic_mappings("a", "b")[topic]
        assert (mapping.remote_topic, mapping.created, dict(mapping.configs)) == (remote, True, want)
        assert run.alive(), run.output()[-2000:]
    assert topic_overrides(a, topic)["min.insync.replicas"] == "2"  # the source did change it
