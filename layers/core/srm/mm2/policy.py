"""Replication policies: how remote topics are named, and what a name says about where a topic came from.

The method set mirrors MirrorMaker 2's ``ReplicationPolicy`` (``formatRemoteTopic``, ``topicSource``,
``upstreamTopic``, ``originalTopic``, ``heartbeatsTopic``, ``checkpointsTopic``, ``offsetSyncsTopic``,
``isInternalTopic``…) so that topics named by MM2 and by us are interchangeable.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from srm.errors import PermanentError

__all__ = [
    "DefaultReplicationPolicy",
    "IdentityReplicationPolicy",
    "PolicyError",
    "ReplicationPolicy",
    "load_policy",
]

# MM2's Java class names, accepted as aliases of ours so an mm2.properties works unchanged.
_JAVA_NAMES = {
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "srm.mm2.policy.DefaultReplicationPolicy",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "srm.mm2.policy.IdentityReplicationPolicy",
    "DefaultReplicationPolicy": "srm.mm2.policy.DefaultReplicationPolicy",
    "IdentityReplicationPolicy": "srm.mm2.policy.IdentityReplicationPolicy",
}


class PolicyError(PermanentError, ValueError):
    """A replication policy cannot be loaded or configured."""


class ReplicationPolicy:
    """The interface every policy implements; subclasses override the naming methods."""

    separator = "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        raise NotImplementedError

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster a remote topic came from, or None for a topic that is not remote."""
        raise NotImplementedError

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, or None for a topic that is not remote."""
        raise NotImplementedError

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster where it was first produced, across any number of hops."""
        seen = topic
        upstream = self.upstream_topic(seen)
        while upstream is not None and upstream != seen:
            seen = upstream
            upstream = self.upstream_topic(seen)
        return seen

    def heartbeats_topic(self) -> str:
        return "heartbeats"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal")

    def is_internal_topic(self, topic: str) -> bool:
        """Kafka's, Connect's, MM2's and our own bookkeeping topics: never replicated as data."""
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith(("__", "."))
            or topic.endswith(("-internal", ".internal"))
            or topic.startswith(("mm2-", "srm-"))
        )

    def upstream_clusters(self, topic: str) -> list[str]:
        """Every cluster alias on the topic's way here, nearest first (``b.a.t`` → ``[b, a]``)."""
        hops: list[str] = []
        current: str | None = topic
        while current is not None:
            source = self.topic_source(current)
            if source is None:
                break
            hops.append(source)
            upstream = self.upstream_topic(current)
            if upstream is None or upstream == current:
                break
            current = upstream
        return hops

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """True when the topic already came through ``target_alias``: replicating it there would loop."""
        return target_alias in self.upstream_clusters(topic)


class DefaultReplicationPolicy(ReplicationPolicy):
    """``<source alias><separator><topic>``; multi-hop names nest (``us-east.us-west.topic1``)."""

    def __init__(self, separator: str = ".", internal_topic_separator_enabled: bool = True) -> None:
        if not separator:
            raise PolicyError("replication.policy.separator must not be empty")
        self.separator = separator
        self._internal_separator = separator if internal_topic_separator_enabled else "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        # Java's String.split drops trailing empty strings; a name needs a non-empty remainder to be remote.
        parts = topic.split(self.separator)
        while parts and parts[-1] == "":
            parts.pop()
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        sep = self._internal_separator
        return f"mm2-offset-syncs{sep}{cluster_alias}{sep}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        sep = self._internal_separator
        return f"{cluster_alias}{sep}checkpoints{sep}internal"

    def is_checkpoints_topic(self, topic: str) -> bool:
        sep = self._internal_separator
        return topic.endswith(f"{sep}checkpoints{sep}internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self._internal_separator}internal")


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Prefixless replication: remote topics keep their names. Heartbeats are still prefixed, as in MM2.

    A name alone cannot tell where a topic came from, so ``topic_source`` answers the configured
    ``source.cluster.alias`` (or None) and loops must be prevented by the filters and the provenance header.
    """

    def __init__(
        self, separator: str = ".", internal_topic_separator_enabled: bool = True, source_alias: str | None = None
    ) -> None:
        super().__init__(separator, internal_topic_separator_enabled)
        self.source_alias = source_alias

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return super().format_remote_topic(source_alias, topic) if self._looks_like_heartbeat(topic) else topic

    def topic_source(self, topic: str) -> str | None:
        return super().topic_source(topic) if self._looks_like_heartbeat(topic) else self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        return super().upstream_topic(topic) if self._looks_like_heartbeat(topic) else topic


def load_policy(class_name: str, separator: str = ".", **options: Any) -> ReplicationPolicy:
    """Build the policy named by ``replication.policy.class``: ours, MM2's Java name, or ``module.Class``."""
    dotted = _JAVA_NAMES.get(class_name, class_name)
    if dotted.startswith("srm.policy."):  # the spelling configurations use: the module's public name
        dotted = "srm.mm2.policy." + dotted.removeprefix("srm.policy.")
    module_name, _, attr = dotted.rpartition(".")
    if not module_name:
        raise PolicyError(f"replication.policy.class={class_name!r}: expected a dotted path such as pkg.module.Class")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise PolicyError(f"replication.policy.class={class_name!r}: cannot import it ({e})") from e
    if not (isinstance(cls, type) and issubclass(cls, ReplicationPolicy)):
        raise PolicyError(f"replication.policy.class={class_name!r} is not a srm.policy.ReplicationPolicy subclass")
    # Pass only the options the class accepts, so a custom policy may take none of them.
    accepted = inspect.signature(cls).parameters
    kwargs = {k: v for k, v in {"separator": separator, **options}.items() if k in accepted}
    return cls(**kwargs)
