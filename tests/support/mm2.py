"""An ``mm2.properties`` as an MM2 user writes it: the one file MirrorMaker 2 and ``srm run`` are both given."""

from __future__ import annotations

from pathlib import Path

from tests.support.runtime import write_properties

# Every topic MM2 and its Connect workers create, with one replica: the test clusters have one broker.
ONE_REPLICA = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "config.storage.replication.factor": "1",
}


def mm2_file(path: Path, aliases: tuple[str, str], bootstraps: tuple[str, str], prefix: str, **extra: str) -> Path:
    """``aliases[0]->aliases[1]`` replicating the topics ``<prefix>.*`` and the groups ``<prefix>-*``, with intervals
    of a second so that a test does not wait minutes; ``extra`` settings added as given."""
    source, target = aliases
    return write_properties(
        path,
        {
            "clusters": f"{source}, {target}",
            f"{source}.bootstrap.servers": bootstraps[0],
            f"{target}.bootstrap.servers": bootstraps[1],
            f"{source}->{target}.enabled": "true",
            f"{source}->{target}.topics": f"{prefix}\\\\..*",
            f"{source}->{target}.groups": f"{prefix}-.*",
            "tasks.max": "1",
            **ONE_REPLICA,
            "refresh.topics.interval.seconds": "1",
            "refresh.groups.interval.seconds": "1",
            "emit.heartbeats.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": "1",
            "sync.topic.acls.enabled": "false",
            **extra,
        },
    )
