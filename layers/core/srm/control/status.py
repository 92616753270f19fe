"""``srm-control status``: what each flow replicates and how far behind it is, from the state table and the clusters
(through a :class:`StatusProbe`; :class:`srm.kafka.clients.KafkaStatusProbe` asks real ones)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from srm.config.settings import SrmConfig
from srm.core.plans import TopicInfo, plan_topics
from srm.core.verification import verified_positions
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.admin import KafkaUnavailableError
from srm.state import (
    EventSourceMappingRecord,
    LossRecord,
    ResetRecord,
    StateError,
    StateStore,
    TopicMappingRecord,
    read_stalls_fact,
)
from srm.state.nodes import Nodes

__all__ = ["FlowStatus", "Stall", "StatusProbe", "TopicStatus", "flow_status"]

# What asking a cluster may raise: it does not answer, a client cannot be built, a record does not decode.
_PROBE_ERRORS = (KafkaException, KafkaUnavailableError, ConfigError, OSError, ValueError, RuntimeError)


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    remote: str
    partitions: int
    lag: int | None  # records on the source not yet committed by the topic's event source mapping
    oldest_unreplicated_ms: int | None = None  # the timestamp of its oldest record not yet replicated (None: none)


@dataclass(frozen=True)
class Stall:
    """Something of a flow stuck for longer than the local runtime's bound, as its worker recorded it."""

    what: str  # "topic <name>" or "function <name>"
    since_ms: int
    reason: str


@dataclass(frozen=True)
class FlowStatus:
    source: str
    target: str
    enabled: bool
    topics: tuple[TopicStatus, ...] | None  # None: the source could not be asked
    last_heartbeat_ms: int | None = None  # the newest heartbeat replicated to the target (its emit time)
    last_checkpoint_ms: int | None = None  # when the flow last emitted checkpoints
    errors: tuple[str, ...] = ()
    topics_from: str = "source"  # "state": the flow's topic mappings; "source": the source cluster's topics
    heartbeat_latency_ms: int | None = None  # replication latency of the newest heartbeat, when recorded
    stalled: tuple[Stall, ...] = ()
    # source offsets purged before they were replicated, or skipped on purpose (a reason: a position moved past them)
    losses: tuple[LossRecord, ...] = ()
    resets: tuple[ResetRecord, ...] = ()  # source partitions that started over
    # event source mappings Lambda reported a problem of at the last topic sync (authentication, network…)
    mapping_problems: tuple[EventSourceMappingRecord, ...] = ()
    # per source partition, the next upstream offset srm-control verify has not verified identical yet
    verified: tuple[tuple[str, int, int], ...] = ()
    verification_differences: int | None = None  # what continuous verification's last run found (None: none ran)

    @property
    def name(self) -> str:
        return str(Flow(self.source, self.target))

    @property
    def lag(self) -> int | None:
        if self.topics is None or any(t.lag is None for t in self.topics):
            return None
        return sum(t.lag or 0 for t in self.topics)

    @property
    def oldest_unreplicated_ms(self) -> int | None:
        """The timestamp of the oldest record any of its topics has not replicated yet (None: none found)."""
        return min((t.oldest_unreplicated_ms for t in self.topics or () if t.oldest_unreplicated_ms), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": self.name,
            "source": self.source,
            "target": self.target,
            "enabled": self.enabled,
            "topicCount": None if self.topics is None else len(self.topics),
            "lag": self.lag,
            "oldestUnreplicated": _iso(self.oldest_unreplicated_ms),
            "topicsFrom": self.topics_from,
            "lastHeartbeat": _iso(self.last_heartbeat_ms),
            "heartbeatLatencyMs": self.heartbeat_latency_ms,
            "lastCheckpoint": _iso(self.last_checkpoint_ms),
            "topics": None
            if self.topics is None
            else [
                {
                    "topic": t.topic,
                    "remoteTopic": t.remote,
                    "partitions": t.partitions,
                    "lag": t.lag,
                    "oldestUnreplicated": _iso(t.oldest_unreplicated_ms),
                }
                for t in self.topics
            ],
            "verifiedThrough": [{"topic": t, "partition": p, "nextOffset": o} for t, p, o in self.verified],
            "verificationDifferences": self.verification_differences,
            "stalled": [{"what": s.what, "since": _iso(s.since_ms), "reason": s.reason} for s in self.stalled],
            "dataLoss": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "startOffset": r.start,
                    "endOffset": r.end,
                    "lostOffsets": r.end - r.start,
                    "detected": _iso(r.at_ms),
                }
                for r in self.losses
                if r.purged
            ],
            "skipped": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "startOffset": r.start,
                    "endOffset": r.end,
                    "skippedOffsets": r.end - r.start,
                    "reason": r.reason,
                    "at": _iso(r.at_ms),
                }
                for r in self.losses
                if not r.purged
            ],
            "topicResets": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "replicatedEnd": r.replicated_end,
                    "reason": r.reason,
                    "detected": _iso(r.at_ms),
                }
                for r in self.resets
            ],
            "mappingProblems": [
                {"topic": m.topic, "mapping": m.id, "problem": m.problem, "since": _iso(m.updated_at_ms)}
                for m in self.mapping_problems
            ],
            "errors": list(self.errors),
        }


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


class StatusProbe(Protocol):
    """What ``status`` asks the clusters (:class:`KafkaStatusProbe` asks real ones; tests pass their own)."""

    def topics(self, config: SrmConfig, alias: str) -> Mapping[str, TopicInfo]: ...

    def lag(self, config: SrmConfig, source: str, target: str, topics: Mapping[str, int]) -> dict[str, int | None]: ...

    def oldest_unreplicated(self, config: SrmConfig, source: str, target: str) -> dict[str, int]:
        """Per topic, the timestamp of its oldest record not yet replicated (asked after :meth:`lag`)."""
        ...

    def last_heartbeat(self, config: SrmConfig, source: str, target: str) -> int | None: ...

    def last_checkpoint(self, config: SrmConfig, source: str, target: str) -> int | None: ...


def flow_status(
    config: SrmConfig, probe: StatusProbe, state: StateStore | None, source: str, target: str
) -> FlowStatus:
    """What the flow replicates and how far behind it is. Topics come from the flow's topic mappings in the state
    table (written by each topic sync) still selected by the current filters, or, before any topic sync, from the
    source cluster's topics through the replicate decision; heartbeat and checkpoint times from the flow status
    the functions record, or else from the newest records that reached the target."""
    settings = config.settings(source, target)
    policy = config.policy(source, target)
    errors: list[str] = []
    facts: Mapping[str, int | str] = {}
    mappings: Mapping[str, TopicMappingRecord] = {}
    losses: tuple[LossRecord, ...] = ()
    resets: tuple[ResetRecord, ...] = ()
    problems: tuple[EventSourceMappingRecord, ...] = ()
    if state is not None:
        try:
            facts, mappings = state.flow_status(source, target), state.topic_mappings(source, target)
            losses, resets = tuple(state.losses(source, target)), tuple(state.resets(source, target))
            problems = tuple(m for _, m in sorted(state.event_source_mappings(source, target).items()) if m.problem)
        except StateError as e:
            errors.append(f"state table: {_reason(e)}")
    selected: dict[str, tuple[str, int]] | None = None
    topics_from = "state" if mappings else "source"
    if mappings:
        replicate = config.replicate(source, target)
        selected = {t: (m.remote_topic, m.partitions) for t, m in mappings.items() if replicate(t)}
    else:
        try:
            plan = plan_topics(
                probe.topics(config, source), source=source, policy=policy, replicate=config.replicate(source, target)
            )
            selected = dict(plan.replicated)
        except _PROBE_ERRORS as e:  # a cluster that does not answer is a status line, not a failure of the command
            errors.append(f"source {source}: {_reason(e)}")
    topics: tuple[TopicStatus, ...] | None = None
    if selected is not None:
        data = {t: rp for t, rp in sorted(selected.items()) if not policy.is_heartbeats_topic(t)}
        lags: dict[str, int | None] = {}
        oldest: dict[str, int] = {}
        try:
            lags = probe.lag(config, source, target, {t: p for t, (_, p) in data.items()}) if data else {}
            oldest = probe.oldest_unreplicated(config, source, target) if any(lags.values()) else {}
        except _PROBE_ERRORS as e:
            errors.append(f"source {source}: {_reason(e)}")
        topics = tuple(TopicStatus(t, remote, p, lags.get(t), oldest.get(t)) for t, (remote, p) in data.items())
    heartbeat, checkpoint = _fact(facts, "heartbeat_ms"), _fact(facts, "last_checkpoint_ms")
    try:
        if heartbeat is None:
            heartbeat = probe.last_heartbeat(config, source, target)
        if checkpoint is None:
            checkpoint = probe.last_checkpoint(config, source, target)
    except _PROBE_ERRORS as e:  # same: reported, the other flows still shown
        errors.append(f"target {target}: {_reason(e)}")
    return FlowStatus(
        source,
        target,
        settings.enabled,
        topics,
        heartbeat,
        checkpoint,
        tuple(errors),
        topics_from=topics_from,
        heartbeat_latency_ms=_fact(facts, "heartbeat_latency_ms"),
        stalled=_stalls(facts),
        losses=losses,
        resets=resets,
        mapping_problems=problems,
        verified=tuple((t, p, up) for (t, p), (up, _) in sorted(verified_positions(facts).items())),
        verification_differences=_count(facts, "verification_differences"),
    )


def member_stalls(nodes: Nodes, source: str, target: str) -> tuple[Stall, ...]:
    """The stalls the flow's live members hold in their items: what the state's ``stalled`` facts say, when the
    state's cluster cannot be reached."""
    try:
        members = nodes.members(source, target)
    except StateError:
        return ()
    return _stalls({f"stalled@{m.node_id}": m.stalled for m in members.values() if m.stalled})


def _stalls(facts: Mapping[str, int | str]) -> tuple[Stall, ...]:
    """The ``stalled`` facts the local workers' watchdogs record, one per node (``stalled@<node>``; JSON: what →
    since, reason), and the topics the checkpoint function found stalled (``topics_stalled``: topic → since, reason);
    a fact that cannot be read is left out. With several nodes, each stall names its node."""
    recorded = {name: value for name, value in facts.items() if name == "stalled" or name.startswith("stalled@")}
    found: list[Stall] = []
    for name, value in sorted(recorded.items()):
        node = name.partition("@")[2]
        for what, since, reason in _stall_entries(value):
            label = f"{what} on node {node}" if node and len(recorded) > 1 else what
            found.append(Stall(label, since, reason))
    found += [
        Stall(f"topic {topic}", since, reason) for topic, since, reason in _stall_entries(facts.get("topics_stalled"))
    ]
    return tuple(found)


def _stall_entries(value: int | str | None) -> list[tuple[str, int, str]]:
    return [(what, since, reason) for what, (since, reason) in sorted(read_stalls_fact(value).items())]


def _count(facts: Mapping[str, int | str], name: str) -> int | None:
    value = facts.get(name)
    return value if isinstance(value, int) and value >= 0 else None


def _fact(facts: Mapping[str, int | str], name: str) -> int | None:
    value = facts.get(name)
    return value if isinstance(value, int) and value > 0 else None


def _reason(e: Exception) -> str:
    cause = e.__cause__ if isinstance(e.__cause__, KafkaException) else e
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        return f"no answer ({cause.args[0].str()})"
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__
