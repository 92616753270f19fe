"""Single Message Transforms in the mirror, on real brokers through the mirror handler (config and state on moto):
records dropped, stamped and stripped on their way, the rest byte-identical in the same partition and order; a dropped
record an upstream gap its neighbours translate exactly around; exactly-once with a filter; a transform that raises
fails the batch."""

from __future__ import annotations

import time
from typing import Any

import pytest

from srm.core.checkpoints import CachedRuns, translate_group
from srm.core.offsets import Run
from srm.handlers.mirror import lambda_handler
from srm.mm2.policy import load_policy
from srm.replication.context import MirrorError
from tests.support.handler import CONTEXT, HandlerFlow, kafka_event
from tests.support.kafka import Rec, create_topic, produce, read_partition, unique

pytestmark = pytest.mark.integration

CONNECT = "org.apache.kafka.connect.transforms."
POLICY = load_policy("org.apache.kafka.connect.mirror.DefaultReplicationPolicy")
# drop tombstones, stamp where a record came from, strip an internal header
CHAIN = {
    "transforms": "dropTombstones, origin, strip",
    "transforms.dropTombstones.type": CONNECT + "Filter",
    "transforms.dropTombstones.predicate": "isTombstone",
    "transforms.origin.type": CONNECT + "InsertHeader",
    "transforms.origin.header": "origin",
    "transforms.origin.value.literal": "a",
    "transforms.strip.type": "DropHeaders",
    "transforms.strip.headers": "x-internal",
    "predicates": "isTombstone",
    "predicates.isTombstone.type": CONNECT + "predicates.RecordIsTombstone",
}
TOMBSTONES = (2, 3, 6, 9)  # offsets of partition 0 holding tombstones: inside the batch, two in a row, and the last


def source_records(a: str, topic: str) -> list[Rec]:
    """Ten records on partition 0 (recent timestamps), tombstones at :data:`TOMBSTONES`, an internal header on some."""
    now = int(time.time() * 1000) - 60_000
    records = []
    for i in range(10):
        headers = (("x-internal", b"secret"), ("keep", b"%d" % i)) if i % 2 else (("keep", None),)
        records.append((0, Rec(b"k%d" % i, None if i in TOMBSTONES else b"v%d" % i, headers, now + i)))
    create_topic(a, topic, 1)
    produce(a, topic, records)
    return read_partition(a, topic, 0)


def expected(records: list[Rec]) -> list[Rec]:
    """What the chain makes of the source records."""
    out = []
    for r in records:
        if r.value is None:
            continue
        headers = (*(h for h in r.headers if h[0] != "x-internal"), ("origin", b"a"))
        out.append(Rec(r.key, r.value, headers, r.timestamp))
    return out


def translated(state: Any, topic: str, offset: int) -> tuple[int | None, str]:
    """What the checkpoint function would translate group ``g``'s committed ``offset`` to."""
    (t,) = translate_group(
        "g",
        {(topic, 0): (offset, "")},
        source="a",
        target="b",
        replicate=lambda _: True,
        policy=POLICY,
        state=CachedRuns(state),
    )
    return t.downstream_offset, t.note


def contents(recs: list[Rec]) -> list[tuple[Any, ...]]:
    return [r.content() for r in recs]


@pytest.mark.parametrize("delivery", ["disabled", "enabled"], ids=["at-least-once", "exactly-once"])
def test_filter_drops_tombstones_others_transformed_and_neighbours_translate_exactly(
    handler_flow: HandlerFlow, delivery: str
) -> None:
    # GIVEN a flow with the chain (at-least-once or exactly-once) and a partition with tombstones among its records
    prefix = unique("smt")
    handler_flow.configure(prefix, {**CHAIN, "exactly.once.source.support": delivery})
    a, b, topic = handler_flow.a, handler_flow.b, f"{prefix}.orders"
    records = source_records(a, topic)

    # WHEN the mirror replicates the batch
    result = lambda_handler(kafka_event(a, topic, {0: records}), CONTEXT)

    # THEN the tombstones are dropped and counted; the others carry the origin header and lost the internal one, in
    # order, with their keys, values and timestamps
    assert result["filtered"] == len(TOMBSTONES) and result["records"] == 10 - len(TOMBSTONES)
    landed = read_partition(b, f"a.{topic}", 0)
    assert contents(landed) == contents(expected(records))
    # AND each dropped offset is an upstream gap: a group whose next record was dropped resumes at the next
    # replicated one, and every replicated record translates to its copy
    assert handler_flow.state.runs("a", "b", topic, 0) == [Run(0, 0, 2), Run(4, 2, 2), Run(7, 4, 2)]
    downstream = {r.offset: i for i, r in enumerate(r for r in records if r.value is not None)}
    for offset in range(10):
        next_replicated = min((o for o in downstream if o >= offset), default=None)
        want = downstream[next_replicated] if next_replicated is not None else len(downstream)
        assert translated(handler_flow.state, topic, offset)[0] == want, f"offset {offset}"
    # AND (exactly-once) the redelivered batch writes nothing again
    if delivery == "enabled":
        again = lambda_handler(kafka_event(a, topic, {0: records}), CONTEXT)
        assert again["records"] == 0
        assert contents(read_partition(b, f"a.{topic}", 0)) == contents(expected(records))


def test_custom_transform_by_dotted_path_runs_in_the_mirror(handler_flow: HandlerFlow) -> None:
    prefix = unique("smt")
    handler_flow.configure(prefix, {"transforms": "rev", "transforms.rev.type": "tests.support.transforms.Reverse"})
    a, b, topic = handler_flow.a, handler_flow.b, f"{prefix}.orders"
    records = source_records(a, topic)
    lambda_handler(kafka_event(a, topic, {0: records}), CONTEXT)
    assert [r.value for r in read_partition(b, f"a.{topic}", 0)] == [
        None if not r.value else r.value[::-1] for r in records
    ]


def test_transform_that_raises_fails_the_batch_naming_the_record_nothing_recorded(handler_flow: HandlerFlow) -> None:
    # GIVEN a custom transform that raises on the value b"boom" (offset 1 of the partition)
    prefix = unique("smt")
    handler_flow.configure(prefix, {"transforms": "x", "transforms.x.type": "tests.support.transforms.Explodes"})
    a, topic = handler_flow.a, f"{prefix}.orders"
    now = int(time.time() * 1000)
    create_topic(a, topic, 1)
    produce(a, topic, [(0, Rec(None, v, (), now)) for v in (b"ok", b"boom", b"after")])
    records = read_partition(a, topic, 0)
    # WHEN the mirror gets the batch THEN it fails (so the event source retries it), naming topic-partition@offset
    with pytest.raises(MirrorError, match=rf"{topic}-0@1: transform x: .*RuntimeError: cannot handle boom"):
        lambda_handler(kafka_event(a, topic, {0: records}), CONTEXT)
    # AND no runs are recorded for it
    assert handler_flow.state.runs("a", "b", topic, 0) == []
