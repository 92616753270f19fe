"""MirrorMaker 2 itself, in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``), from the same Apache
Kafka install as the brokers: the peer ``make bench`` races ``srm run`` against, on the same clusters and data.

Tuned as Kafka's MirrorMaker 2 docs suggest (``tasks.max`` of at least 2; producer batching; consumer fetch sizes)
and to match srm's own clients (idempotent producer, 5 requests in flight, no compression); the settings are
printed with the result."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bench.process import Replicator
from srm.local.clusters import LOG4J2_PROPERTIES
from srm.local.kafka import libs_dir

__all__ = ["MM2_TUNING", "Mm2Run", "mm2_properties"]

# Beside the flow's clusters and topics; `T`/`S` stand for the target and source aliases.
MM2_TUNING = {
    "tasks.max": "2",
    "T.producer.linger.ms": "5",
    "T.producer.batch.size": "1048576",
    "T.producer.compression.type": "none",
    "T.producer.enable.idempotence": "true",
    "T.producer.max.in.flight.requests.per.connection": "5",
    "S.consumer.max.poll.records": "10000",
    "S.consumer.fetch.max.bytes": "52428800",
    "S.consumer.max.partition.fetch.bytes": "10485760",
}


def mm2_properties(source: str, target: str, bootstraps: tuple[str, str], topics: list[str]) -> str:
    """An ``mm2.properties`` replicating ``topics`` from ``source`` to ``target`` (single-broker clusters)."""
    props = {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": bootstraps[0],
        f"{target}.bootstrap.servers": bootstraps[1],
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": ", ".join(t.replace(".", "\\\\.") for t in topics),
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "sync.topic.acls.enabled": "false",  # the bench clusters run no authorizer
    }
    for key, value in MM2_TUNING.items():
        props[key.replace("T.", f"{target}.", 1).replace("S.", f"{source}.", 1)] = value
    return "".join(f"{k} = {v}\n" for k, v in props.items())


class Mm2Run(Replicator):
    """One MirrorMaker 2 node in dedicated mode, as ``connect-mirror-maker.sh mm2.properties`` starts it."""

    def __init__(self, properties: Path, workdir: Path) -> None:
        (workdir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        java_home = os.environ.get("JAVA_HOME")
        java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java"
        command = [
            java,
            "-Xms256m",
            "-Xmx2g",  # connect-mirror-maker.sh's heap
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
            "-cp",
            str(libs_dir() / "*"),
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(properties),
        ]
        super().__init__(command, workdir, "mm2.log")
