"""MirrorMaker 2 itself, in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``), from the same Apache
Kafka install as the brokers: the peer ``make bench`` races ``srm run`` against, on the same clusters and data.

Tuned as Kafka's MirrorMaker 2 docs suggest (``tasks.max`` of at least 2; producer batching; consumer fetch sizes)
and to match srm's own clients (idempotent producer, 5 requests in flight, no compression); the settings are
printed with the result. Exactly-once adds what Kafka's MirrorMaker 2 docs ask of a dedicated cluster
(``MM2_EXACTLY_ONCE``)."""

from __future__ import annotations

from pathlib import Path

from bench.process import Replicator
from srm.local.mirrormaker import mirror_maker_command

__all__ = ["MM2_EXACTLY_ONCE", "MM2_TUNING", "Mm2Run", "mm2_properties"]

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

# Exactly-once writes to the target (Connect's transactional source tasks, one transaction per poll); dedicated mode
# needs its internal REST server for that (KIP-710), here on a free port so nothing else on the machine clashes; the
# source is read read_committed as the docs advise and as srm's exactly-once flows read it.
MM2_EXACTLY_ONCE = {
    "T.exactly.once.source.support": "enabled",
    "dedicated.mode.enable.internal.rest": "true",
    "listeners": "http://localhost:0",
    "S.consumer.isolation.level": "read_committed",
}


def mm2_properties(
    source: str, target: str, bootstraps: tuple[str, str], topics: list[str], exactly_once: bool = False
) -> str:
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
    for key, value in (MM2_TUNING | (MM2_EXACTLY_ONCE if exactly_once else {})).items():
        props[key.replace("T.", f"{target}.", 1).replace("S.", f"{source}.", 1)] = value
    return "".join(f"{k} = {v}\n" for k, v in props.items())


class Mm2Run(Replicator):
    """One MirrorMaker 2 node in dedicated mode, as ``connect-mirror-maker.sh mm2.properties`` starts it."""

    def __init__(self, properties: Path, workdir: Path, cpus: str | None = None) -> None:
        command = mirror_maker_command(properties, workdir)
        super().__init__(["taskset", "-c", cpus, *command] if cpus else command, workdir, "mm2.log")
