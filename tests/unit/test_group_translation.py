"""srm.core.checkpoints.translate_group: a group's committed offsets translated forward and back through the offset
runs the mirror recorded (the state table, on moto or LocalStack), including the quiet tail past the last replicated
record."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from srm.aws.state import DynamoDBState
from srm.config.settings import FlowSettings
from srm.core.checkpoints import CachedRuns, GroupOffsets, PartitionTranslation, QuietProbe, RunsLookup, translate_group
from srm.core.offsets import Run
from srm.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy
from srm.state import StateStore

pytestmark = pytest.mark.aws_adapter


def translate_a_to_b(
    state: RunsLookup,
    offsets: GroupOffsets,
    policy: ReplicationPolicy | None = None,
    *,
    group: str = "g",
    replicate: Callable[[str], bool] | None = None,
    quiet: QuietProbe | None = None,
) -> list[PartitionTranslation]:
    """``group``'s offsets translated by the flow a->b: by default with MM2's policy and what the default settings
    replicate."""
    policy = policy or DefaultReplicationPolicy()
    replicate = replicate or FlowSettings().replicate_decision("b", policy)
    return translate_group(
        group, offsets, source="a", target="b", replicate=replicate, policy=policy, state=state, quiet=quiet
    )


def test_translate_group_forward_maps_into_the_run_holding_the_offset(state: StateStore) -> None:
    # GIVEN a->b replicated orders-0 upstream 0..9 to downstream 100..109, and 10..19 to 200..209 after a retry
    state.record_runs("a", "b", "orders", 0, [Run(0, 100, 10), Run(10, 200, 10)])
    # WHEN the group committed 15 (the sixth record of the second run)
    (t,) = translate_a_to_b(state, {("orders", 0): (15, "m")}, group="app")
    # THEN it resumes at the same record on b's remote topic, metadata kept
    assert (t.remote_topic, t.downstream_offset, t.direction, t.metadata) == ("a.orders", 205, "forward", "m")


def test_translate_group_past_the_last_run_is_unknown_unless_the_source_is_quiet(state: StateStore) -> None:
    # GIVEN runs up to upstream 10, and a group that committed 11 (e.g. after a transaction marker at 10)
    state.record_runs("a", "b", "orders", 0, [Run(0, 0, 10)])
    offsets = {("orders", 0): (11, "")}
    asked: list[tuple[str, int, int, int]] = []

    def quiet(topic: str, partition: int, start: int, end: int) -> bool:
        asked.append((topic, partition, start, end))
        return True

    # WHEN translated without a way to ask the source, and with the source saying [10, 11) holds no record
    (unknown,) = translate_a_to_b(state, offsets)
    (known,) = translate_a_to_b(state, offsets, quiet=quiet)
    # THEN unknown first (with the reason), then the end of the remote partition
    assert (unknown.downstream_offset, unknown.note) == (
        None,
        "records below the committed offset are not replicated yet",
    )
    assert known.downstream_offset == 10
    assert asked == [("orders", 0, 10, 11)]


def test_translate_group_nothing_replicated_yet_says_so(state: StateStore) -> None:
    (t,) = translate_a_to_b(state, {("orders", 0): (3, "")})
    assert (t.downstream_offset, t.note) == (None, "nothing replicated yet")


def test_translate_group_failback_translates_a_remote_topic_back_to_its_origin(state: StateStore) -> None:
    # GIVEN b->a replicated b's orders-0 upstream 0..9 to a's b.orders-0 at 50..59 (a failover ran on a)
    state.record_runs("b", "a", "orders", 0, [Run(0, 50, 10)])
    # WHEN a group on a committed 55 on b.orders, and a->b translates it
    (t,) = translate_a_to_b(state, {("b.orders", 0): (55, "")})
    # THEN it resumes on b's own orders at the same record
    assert (t.topic, t.remote_topic, t.downstream_offset, t.direction) == ("b.orders", "orders", 5, "failback")


def test_translate_group_failback_with_a_name_keeping_policy_follows_the_recorded_runs(state: StateStore) -> None:
    # GIVEN the identity policy: b->a replicated orders (same name) 0..9 to 20..29 on a
    state.record_runs("b", "a", "orders", 0, [Run(0, 20, 10)])
    policy = IdentityReplicationPolicy(source_alias="a")
    decision = FlowSettings(topics="other").replicate_decision("b", policy)  # a->b does not replicate orders
    # WHEN a group on a committed 25 on partition 0, and 3 on partition 1 (which b never replicated to a)
    translations = translate_a_to_b(
        state, {("orders", 0): (25, ""), ("orders", 1): (3, "")}, policy, replicate=decision
    )
    # THEN partition 0 goes back to 5 on b; partition 1 is a's own and not a->b's to translate
    assert [(t.partition, t.remote_topic, t.downstream_offset, t.direction) for t in translations] == [
        (0, "orders", 5, "failback")
    ]


def test_cached_runs_read_a_partition_once_for_every_group(state: StateStore) -> None:
    # GIVEN two groups with offsets on the same failed-back partition
    state.record_runs("b", "a", "orders", 0, [Run(0, 50, 10)])
    reads: list[tuple[str, str, str, int]] = []

    class Counting(DynamoDBState):
        def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
            reads.append((source, target, topic, partition))
            return super().runs(source, target, topic, partition)

    counting = Counting(state._db, state.table)
    runs = CachedRuns(counting)
    # WHEN both groups are translated in one checkpoint run
    for group in ("g1", "g2"):
        translate_a_to_b(runs, {("b.orders", 0): (52, "")}, group=group)
    # THEN the partition's runs were read once
    assert reads == [("b", "a", "orders", 0)]
