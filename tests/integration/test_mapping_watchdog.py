"""What the local watchdog reads from an emulated mapping, against a real broker: a healthy mapping — busy, idle,
or on an empty partition — is never stalled; partitions held by another member of its group are a stall, with
where it began, until that member leaves; a handler call that does not return is a stall naming where it waits; a
rebuilt consumer (a static member) gets its partitions back at once."""

from __future__ import annotations

import time
from typing import Any

import pytest

from srm.local.event_source import EmulatedMapping
from tests.support.groups import Squatter
from tests.support.kafka import numbered_records, produce, wait_for
from tests.support.mappings import Recorder

pytestmark = pytest.mark.integration

BOUND_S = 2.0


@pytest.fixture
def mapping(static_mapping) -> tuple[EmulatedMapping, Recorder, str, str, str]:
    return static_mapping


def assert_delivered_in_order(recorder: Recorder, produced: list[tuple[int, Any]]) -> None:
    """Every produced record delivered, each partition's first copies in offset order (re-deliveries allowed)."""
    for p in {p for p, _ in produced}:
        want = [r.value for q, r in produced if q == p]
        seen: list[bytes] = []
        for q, _o, v in recorder.delivered:
            if q == p and v not in seen:
                seen.append(v)
        assert seen == want, f"partition {p}: {len(seen)} of {len(want)} delivered, or out of order"


def test_healthy_mapping_busy_idle_or_empty_is_never_stalled(mapping) -> None:
    m, recorder, bootstrap, topic, _group = mapping
    # GIVEN records on partition 0 only (partition 1 stays empty), delivered
    produced = numbered_records(500, 1, "busy")
    produce(bootstrap, topic, produced)
    wait_for(lambda: len(recorder.delivered) >= 500, 30, message="records delivered")
    wait_for(lambda: m.assigned == (0, 1), 10, message="both partitions assigned")

    # WHEN it sits idle for several times the bound, with records arriving now and then
    deadline = time.monotonic() + 4 * BOUND_S
    stalls = []
    while time.monotonic() < deadline:
        stalls.append(m.stall(BOUND_S))
        time.sleep(0.25)
    produce(bootstrap, topic, numbered_records(5, 1, "late"))

    # THEN it was never stalled
    assert stalls == [None] * len(stalls)
    wait_for(lambda: len(recorder.delivered) >= 505, 30, message="late records delivered")
    assert m.stall(BOUND_S) is None


def test_partitions_held_by_another_member_are_a_stall_until_it_leaves(mapping) -> None:
    m, recorder, bootstrap, topic, group = mapping
    produced = numbered_records(200, 2, "before")
    produce(bootstrap, topic, produced)
    wait_for(lambda: len(recorder.delivered) >= 200, 30, message="first records delivered")

    # GIVEN a member that never leaves joins the mapping's group and takes a partition
    squatter = Squatter(bootstrap, group, topic)
    try:
        held = wait_for(squatter.assigned, 30, message="the other member holding a partition")
        more = numbered_records(200, 2, "during")
        produce(bootstrap, topic, more)
        produced += more

        # THEN the mapping is stalled, naming the partition it misses and its group, from when it lost it
        stall = wait_for(lambda: m.stall(BOUND_S), 30, message="the mapping stalled")
        since, reason = stall
        assert f"partition {held[0]} of 2 of {topic} not assigned" in reason and group in reason, reason
        # … and a new consumer changes nothing about that (a partition is still held): the stall keeps its start
        assert m.rebuild()
        time.sleep(BOUND_S)
        still = m.stall(BOUND_S)
        assert still is not None and still[0] == since and " of 2 of " in still[1], still
    finally:
        squatter.leave()

    # WHEN the other member leaves, the mapping gets every partition back and delivers what waited there
    wait_for(lambda: m.stall(BOUND_S) is None and m.assigned == (0, 1), 30, message="the stall over")
    wait_for(lambda: len({v for _p, _o, v in recorder.delivered}) >= 400, 30, message="every record delivered")
    assert_delivered_in_order(recorder, produced)


def test_a_handler_call_that_does_not_return_is_a_stall_naming_where_it_waits(mapping) -> None:
    m, recorder, bootstrap, topic, _group = mapping
    produce(bootstrap, topic, numbered_records(10, 2, "first"))
    wait_for(lambda: len(recorder.delivered) >= 10 and m.assigned == (0, 1), 30, message="first records")

    # GIVEN the handler's next call blocks
    recorder.gate.clear()
    produced = numbered_records(10, 2, "stuck")
    produce(bootstrap, topic, produced)

    # THEN past the bound the mapping is stalled, saying which call waits and where
    _since, reason = wait_for(lambda: m.stall(BOUND_S), 30, message="the mapping stalled")
    assert f"no batch of {topic} replicated: a handler call under way for" in reason, reason
    assert "mappings.py" in reason and "__call__" in reason, reason

    # WHEN the call returns, the stall is over and the records are delivered
    recorder.gate.set()
    wait_for(lambda: m.stall(BOUND_S) is None, 30, message="the stall over")
    wait_for(lambda: len(recorder.delivered) >= 20, 30, message="the held records delivered")


def test_rebuilt_consumer_takes_its_partitions_back_at_once(mapping) -> None:
    m, recorder, bootstrap, topic, _group = mapping
    produce(bootstrap, topic, numbered_records(100, 2, "first"))
    wait_for(lambda: len(recorder.delivered) >= 100 and m.assigned == (0, 1), 30, message="first records")

    # WHEN its consumer is closed and a new one joins with the same group.instance.id
    assert m.rebuild()
    time.sleep(1.5)  # past one observation of the assignment by the new consumer
    produced = numbered_records(100, 2, "after")
    produce(bootstrap, topic, produced)

    # THEN the new consumer has both partitions without waiting for a rebalance, and delivers what follows
    wait_for(lambda: m.assigned == (0, 1), 3, message="partitions back within seconds")
    wait_for(lambda: len(recorder.delivered) >= 200, 30, message="records after the rebuild delivered")
    assert m.stall(BOUND_S) is None
