"""A mapping's consumer (a static member of its group) fenced, against a real broker. Another consumer that took its
``group.instance.id`` and stays (a second node given this node's id): the mapping stops and names it. One that took
it and is gone — what librdkafka's own rejoin after a session timeout leaves behind when a commit of the old session
is fenced (a coordinator that did not answer for a while, as while a broker restarts): the mapping takes its place
back with a new consumer once the group has let that member go, and goes on, losing nothing."""

from __future__ import annotations

import logging

import pytest

from srm.local.event_source import EmulatedMapping
from tests.support.groups import Squatter
from tests.support.kafka import numbered_records, produce, wait_for
from tests.support.mappings import Recorder

pytestmark = pytest.mark.integration


@pytest.fixture
def mapping(static_mapping) -> tuple[EmulatedMapping, Recorder, str, str, str]:
    m, recorder, bootstrap, topic, _group = static_mapping
    produce(bootstrap, topic, numbered_records(100, 2, "before"))
    wait_for(lambda: len(recorder.delivered) >= 100 and m.assigned == (0, 1), 30, message="first records")
    return static_mapping


def taker(bootstrap: str, group: str, topic: str, m: EmulatedMapping, client: str) -> Squatter:
    """A consumer that joins ``group`` with the mapping's group.instance.id, holding its partitions."""
    config = {"group.instance.id": m.instance_id, "client.id": client, "session.timeout.ms": 6000}
    other = Squatter(bootstrap, group, topic, config=config)
    wait_for(other.assigned, 30, message="the other consumer holding the partitions")
    return other


def test_a_member_whose_id_another_consumer_took_stops_naming_it(mapping) -> None:
    m, _recorder, bootstrap, topic, group = mapping
    # WHEN another consumer joins the group with the mapping's group.instance.id and stays
    other = taker(bootstrap, group, topic, m, "other-node")
    try:
        # THEN the mapping stops, naming who took its place
        wait_for(lambda: not m.is_alive(), 60, message="the fenced mapping stopped")
        assert m.fenced is not None and "@127.0.0.1" in m.fenced, m.fenced  # client id @ host, as the group tells
    finally:
        other.leave()


def test_a_member_whose_id_a_consumer_since_gone_took_takes_its_place_back_losing_nothing(mapping, caplog) -> None:
    m, recorder, bootstrap, topic, group = mapping
    caplog.set_level(logging.WARNING, logger="srm.local.event_source")
    # WHEN a consumer joins with the mapping's group.instance.id and is gone at once (a static member leaves
    # nothing: the group lets it go a session later), records arriving meanwhile
    taker(bootstrap, group, topic, m, "a-rejoin").leave()
    produce(bootstrap, topic, numbered_records(100, 2, "during"))
    # THEN the mapping, fenced, takes its place back with a new consumer
    wait_for(lambda: "a new consumer takes its place" in caplog.text, 60, message="the mapping taking its place back")
    produce(bootstrap, topic, numbered_records(100, 2, "after"))
    # … and delivers every record (a batch whose commit was fenced is delivered again: at least once)
    wait_for(lambda: len({v for _p, _o, v in recorder.delivered}) >= 300, 60, message="every record delivered")
    assert m.is_alive() and m.fenced is None
    for p in (0, 1):
        offsets = [o for q, o, _v in recorder.delivered if q == p]
        assert sorted(set(offsets)) == list(range(150)), f"partition {p}: {offsets}"
