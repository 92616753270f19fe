"""``srm run --connectors DIR``: a flow defined by MirrorMaker 2 connector definitions as Kafka Connect-based
replication deploys them (KafkaConnector YAML, Connect REST JSON) replicates as a configuration file's would, and
``srm-control --local`` reaches it with those definitions."""

from __future__ import annotations

from pathlib import Path

from tests.support.kafka import assert_identical, create_topic, numbered_records, produce, unique, wait_replicated
from tests.support.runtime import SrmRun, status_text
from tests.unit.test_connectors import kafka_connector, rest_body


def test_a_flow_from_connector_definitions_replicates_identically(clusters, tmp_path: Path):
    # GIVEN a topic with records on a, and the source, checkpoint and heartbeat connectors of a->b in a folder
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("conn")
    topic = f"{prefix}.orders"
    create_topic(a, topic, 3)
    produce(a, topic, numbered_records(300, 3, topic))
    aliases = {"source.cluster.alias": "a", "target.cluster.alias": "b"}
    clusters_of = {**aliases, "source.cluster.bootstrap.servers": a, "target.cluster.bootstrap.servers": b}
    folder = tmp_path / "connectors"
    folder.mkdir()
    kafka_connector(folder / "source.yaml", "source", "MirrorSourceConnector", {**clusters_of, "topics": f"{prefix}.*"})
    rest_body(
        folder / "checkpoint.json",
        "checkpoint",
        "MirrorCheckpointConnector",
        {**clusters_of, "topics": f"{prefix}.*", "groups": f"{prefix}.*", "emit.checkpoints.interval.seconds": 5},
    )
    kafka_connector(
        folder / "heartbeat.yaml",
        "heartbeat",
        "MirrorHeartbeatConnector",
        {**aliases, "target.cluster.bootstrap.servers": a, "producer.override.bootstrap.servers": a},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    # WHEN srm run is given the folder
    with SrmRun(folder, run_dir) as run:
        # THEN the topic is replicated identically, with records written meanwhile
        wait_replicated(a, topic, b, f"a.{topic}", timeout=90)
        produce(a, topic, numbered_records(60, 3, topic, start=300))
        wait_replicated(a, topic, b, f"a.{topic}", timeout=60)
        assert assert_identical(a, topic, b, f"a.{topic}") == {0: 120, 1: 120, 2: 120}
        # … and srm-control --local in its directory reads the state with the definitions' settings
        assert "a->b" in status_text(run_dir), run.output()[-2000:]
