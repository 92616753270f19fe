"""``srm-control replication-offsets`` and the metrics API's Connect-shaped offsets routes: where replication of a
flow's source partitions stands (the committed offsets of its event source mappings' groups on the source) and
moving it (:mod:`srm.core.replication_offsets` decides where to).

A position moves only while nothing consumes the group: the broker refuses an admin's commit to a group with
members, and a running mapping would commit over it anyway. So a move checks the groups first and refuses while they
have members, unless it is given a :class:`FlowPause` (``--force-stop``): the flow is disabled, its groups are waited
for until they are empty, the positions are moved, and the flow is enabled again.

Before a position moves forward, the offsets it skips are recorded in the state as a lost range with a reason, so
offset translation never maps a group's committed offset there past records the target does not have; moving
backward replicates records again (duplicates on the target, by design).

An exactly-once flow keeps each partition's position with its transactions too (its offsets topic on the target,
:mod:`srm.replication.exactly_once`), and leaves out of a batch what that position says was written: a move backward
rewinds it first, in a transaction of the partition's own ``transactional.id``, which fences the producer a warm
container may still hold, so that container reads the position back before its next batch. (First: should the
group's commit then fail, the flow resumes where the group stood, and a lower position there leaves nothing out.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import SrmConfig
from srm.control.edits import Control, ControlError
from srm.core.plans import mapping_group_id, plan_topics
from srm.core.replication_offsets import Move, MoveTo, PartitionPosition, StartFrom, first_copies, plan_moves
from srm.core.source_offsets import SourceOffset, offsets_topic
from srm.errors import RetriableError, SrmError
from srm.flow import Flow
from srm.kafka.admin import list_topics
from srm.kafka.clients import admin_config, build, producer_config
from srm.kafka.mapping_groups import GroupInUseError, active_members, commit_positions, offsets_at, read_positions
from srm.kafka.transactions import transactional_id
from srm.state import StateStore

__all__ = [
    "FlowPause",
    "MappingSwitch",
    "MoveReport",
    "ReplicationOffsets",
    "ReplicationRunningError",
    "UnknownTopicError",
]

log = logging.getLogger(__name__)


class ReplicationRunningError(SrmError, RuntimeError):
    """The flow's mappings consume their groups: positions cannot move now (stop the flow first)."""


class UnknownTopicError(ControlError, LookupError):
    """A topic or partition the flow does not replicate."""


class MappingSwitch(Protocol):
    """Where event source mappings are turned off and on directly (Lambda's), beside the flow's ``enabled``."""

    def set_enabled(self, ids: Sequence[str], enabled: bool) -> None: ...


@dataclass
class FlowPause:
    """Stops a flow's replication for a move and starts it again: the flow disabled in the configuration (the local
    runtime stops its worker; topic sync keeps its mappings paused), and, where given, its mappings switched off at
    once (on AWS topic sync would only pause them at its next run)."""

    control: Control
    flow: Flow
    mappings: MappingSwitch | None = None
    mapping_ids: Sequence[str] = ()
    _disabled: bool = field(default=False, init=False)

    def stop(self) -> None:
        change = self.control.set_enabled(*self.flow, False)
        self._disabled = change.written
        if self.mappings is not None and self.mapping_ids:
            self.mappings.set_enabled(self.mapping_ids, False)

    def resume(self) -> None:
        if self._disabled:
            self.control.set_enabled(*self.flow, True)
        if self.mappings is not None and self.mapping_ids:
            self.mappings.set_enabled(self.mapping_ids, True)


@dataclass(frozen=True)
class MoveReport:
    flow: Flow
    to: str
    moves: list[Move]
    dry_run: bool
    paused: bool = False  # the flow was stopped for the move and started again

    @property
    def replayed(self) -> int:
        return sum(m.replayed for m in self.moves)

    @property
    def skipped(self) -> int:
        return sum(s[1] - s[0] for m in self.moves if (s := m.skipped) is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": str(self.flow),
            "to": self.to,
            "dryRun": self.dry_run,
            "paused": self.paused,
            "partitions": [m.to_dict() for m in self.moves],
            "skipped": self.skipped,
            "replayed": self.replayed,
        }


@dataclass
class ReplicationOffsets:
    """One flow's source positions: read, planned, moved."""

    config: SrmConfig
    flow: Flow
    admin: AdminClient  # of the source cluster
    state: StateStore | None = None  # where skipped ranges are recorded (none: a move forward is refused)
    timeout: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    resolver: SecretResolver = default_secret_resolver  # for the target's producer (an exactly-once flow's rewind)

    @classmethod
    def for_flow(
        cls, config: SrmConfig, source: str, target: str, resolver: SecretResolver, state: StateStore | None, **kw: Any
    ) -> ReplicationOffsets:
        flow = config.check_flow(source, target)
        admin = build(AdminClient, admin_config(config, source, flow, resolver), config, source, "admin")
        return cls(config, flow, cast(AdminClient, admin), state, resolver=resolver, **kw)

    @property
    def start_from(self) -> StartFrom:
        return self.config.start_from(*self.flow)

    def topics(self, topic: str | None = None) -> dict[str, int]:
        """The topics the flow replicates now (as topic sync selects them), by partition count; only ``topic``
        when given (UnknownTopicError when the flow does not replicate it)."""
        source, target = self.flow
        plan = plan_topics(
            list_topics(self.admin, self.timeout),
            source=source,
            policy=self.config.policy(source, target),
            replicate=self.config.replicate(source, target),
        )
        topics = {t: n for t, (_, n) in plan.replicated.items()}
        if topic is None:
            return topics
        if topic not in topics:
            raise UnknownTopicError(f"{self.flow} does not replicate topic {topic!r} (topics: {_names(topics)})")
        return {topic: topics[topic]}

    def groups(self, topics: Mapping[str, int]) -> dict[str, str]:
        return {t: mapping_group_id(*self.flow, t) for t in topics}

    def positions(self, topic: str | None = None, partition: int | None = None) -> list[PartitionPosition]:
        topics = self.topics(topic)
        found = read_positions(self.admin, self.groups(topics), topics, self.timeout)
        if partition is None:
            return found
        chosen = [p for p in found if p.partition == partition]
        if not chosen:
            raise UnknownTopicError(f"{topic or 'the topics'} of {self.flow} have no partition {partition}")
        return chosen

    def plan(self, to: MoveTo, topic: str | None = None, partition: int | None = None) -> list[Move]:
        positions = self.positions(topic, partition)
        at_time = None
        if to.kind == "datetime":
            assert to.timestamp_ms is not None
            at_time = offsets_at(self.admin, [(p.topic, p.partition) for p in positions], to.timestamp_ms, self.timeout)
        return self._counted(plan_moves(positions, to, self.start_from, at_time=at_time))

    def _counted(self, moves: list[Move]) -> list[Move]:
        """Moves backward with the records an earlier move skipped counted apart from the duplicates (the state
        knows both: where moves skipped, and what the offset runs hold)."""
        if self.state is None:
            return moves
        source, target = self.flow
        counted = []
        for m in moves:
            if m.new < m.start:
                skipped = self.state.lost_ranges(source, target, m.topic, m.partition)
                if any(len(r) == 3 for r in skipped):
                    runs = self.state.runs(source, target, m.topic, m.partition)
                    m = replace(m, first_copies=first_copies(m, skipped, runs))
            counted.append(m)
        return counted

    def plan_each(self, wanted: Mapping[tuple[str, int], int | None]) -> list[Move]:
        """Per partition, to the given next offset, or (None) where a partition with no position starts."""
        positions = {(p.topic, p.partition): p for t in {t for t, _ in wanted} for p in self.positions(t)}
        moves = []
        for (topic, partition), offset in sorted(wanted.items()):
            position = positions.get((topic, partition))
            if position is None:
                raise UnknownTopicError(f"{topic} of {self.flow} has no partition {partition}")
            to = MoveTo(self.start_from) if offset is None else MoveTo("offset", offset)
            moves += plan_moves([position], to, self.start_from)
        return self._counted(moves)

    def members(self, moves: Sequence[Move]) -> dict[str, int]:
        """The groups of ``moves`` that have members now, with how many."""
        groups = {mapping_group_id(*self.flow, m.topic) for m in moves}
        return {g: n for g, n in active_members(self.admin, groups, self.timeout).items() if n}

    def apply(
        self,
        moves: Sequence[Move],
        *,
        reason: str,
        pause: FlowPause | None = None,
        wait_s: float = 60.0,
        running_hint: str = "",
    ) -> bool:
        """Move every partition of ``moves``: True when the flow was paused for it (and started again).

        Refused while a group has members (ReplicationRunningError) unless ``pause`` is given; on an exactly-once
        flow a move backward rewinds the position kept with its transactions too. ``reason`` is recorded with the
        offsets a move forward skips."""
        moving = [m for m in moves if m.new != m.old]
        if not moving:
            return False
        if any(m.skipped for m in moving) and self.state is None:
            raise ControlError("a move forward records the offsets it skips in the state, which cannot be reached")
        busy = self.members(moving)
        if busy and pause is None:
            groups = ", ".join(f"{g} ({n} member{'s' if n > 1 else ''})" for g, n in sorted(busy.items()))
            raise ReplicationRunningError(
                f"{self.flow} is replicating (active in {groups}): positions move only while it is stopped; "
                f"{running_hint or f'stop it first (srm-control flows disable {str(self.flow)!r})'}"
            )
        if not busy:
            self._move(moving, reason)
            return False
        assert pause is not None
        pause.stop()
        try:
            self._wait_empty(moving, wait_s)
            self._move(moving, reason)
        finally:
            pause.resume()
        return True

    def _wait_empty(self, moves: Sequence[Move], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            busy = self.members(moves)
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise RetriableError(
                    f"{self.flow} was stopped but {', '.join(sorted(busy))} still has members after {wait_s:g}s; "
                    "nothing was moved and the flow is enabled again"
                )
            self.sleep(1.0)

    def _move(self, moves: Sequence[Move], reason: str) -> None:
        source, target = self.flow
        at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        # The skipped offsets are recorded before the position moves: should the move then fail, translation only
        # refuses offsets that replication goes on to cover (a range a run holds translates again).
        for m in moves:
            skipped = m.skipped
            if skipped is not None:
                assert self.state is not None
                self.state.record_loss(source, target, m.topic, m.partition, *skipped, reason=f"{reason} at {at}")
        if self.config.settings(source, target).exactly_once:
            self._rewind_transactions([m for m in moves if m.new < m.start])
        by_group: dict[str, dict[tuple[str, int], int]] = {}
        for m in moves:
            by_group.setdefault(mapping_group_id(source, target, m.topic), {})[(m.topic, m.partition)] = m.new
        for group, offsets in sorted(by_group.items()):
            try:
                commit_positions(self.admin, group, offsets, self.timeout)
            except GroupInUseError as e:  # a member joined since the check: the flow was started meanwhile
                raise ReplicationRunningError(f"{self.flow}: {e}; nothing more was moved") from None
        for m in moves:
            log.info("%s: %s-%d moved from %s to %d", self.flow, m.topic, m.partition, m.old, m.new)

    def _rewind_transactions(self, moves: Sequence[Move]) -> None:
        """An exactly-once flow's positions in its offsets topic moved back with ``moves``: each in a transaction of
        its partition's ``transactional.id`` (the mirror's producer for it fenced, see the module's docstring)."""
        if not moves:
            return
        source, target = self.flow
        settings = self.config.settings(source, target)
        conf = producer_config(
            self.config,
            target,
            self.flow,
            delivery_timeout_ms=settings.mirror_delivery_timeout_ms,
            resolver=self.resolver,
        )
        topic = offsets_topic(source)
        for m in moves:
            offset = SourceOffset(source, m.topic, m.partition, m.new - 1)  # its last replicated: none past the move
            producer = Producer({**conf, "transactional.id": transactional_id(source, target, m.topic, m.partition)})
            try:
                producer.init_transactions(self.timeout)
                producer.begin_transaction()
                producer.produce(topic, offset.value(), offset.key())
                producer.commit_transaction(self.timeout)
            except KafkaException as e:
                raise RetriableError(
                    f"{self.flow}: cannot move {m.topic}-{m.partition}'s exactly-once position in {topic} on "
                    f"{target}: {e.args[0].str()}; no group position was moved: run the move again"
                ) from None
            finally:
                producer.flush(0)
            log.info("%s: %s-%d exactly-once position in %s moved to %d", self.flow, m.topic, m.partition, topic, m.new)


def _names(topics: Mapping[str, int]) -> str:
    return ", ".join(sorted(topics)) or "none"
