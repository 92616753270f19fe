"""Where a move of replication positions takes each partition, what it skips and replays, Connect's offsets shape,
and translation refusing what a move skipped (pure: no cluster)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.core.offsets import Origin, Run, translate_checked
from srm.core.replication_offsets import (
    ConnectOffsetsError,
    MoveTo,
    PartitionPosition,
    connect_offsets,
    connector_flow,
    connector_names,
    first_copies,
    parse_connect_offsets,
    parse_datetime,
    plan_moves,
)
from srm.errors import ConfigError
from srm.flow import Flow

# orders-0 committed at 40 of 10..100; orders-1 never committed, 0..30
POSITIONS = [PartitionPosition("orders", 0, 40, 10, 100), PartitionPosition("orders", 1, None, 0, 30)]


def moved(to: MoveTo, start_from: str = "earliest", **kw) -> list[tuple[int, int | None, int, int, object, int]]:
    return [
        (m.partition, m.old, m.start, m.new, m.skipped, m.replayed) for m in plan_moves(POSITIONS, to, start_from, **kw)
    ]  # type: ignore[arg-type]


def test_plan_to_latest_skips_what_is_not_replicated_yet() -> None:
    assert moved(MoveTo("latest")) == [(0, 40, 40, 100, (40, 100), 0), (1, None, 0, 30, (0, 30), 0)]


def test_plan_to_earliest_replays_what_was_replicated() -> None:
    assert moved(MoveTo("earliest")) == [(0, 40, 40, 10, None, 30), (1, None, 0, 0, None, 0)]


def test_plan_without_a_committed_offset_starts_from_auto_offset_reset() -> None:
    # with auto.offset.reset = latest, an uncommitted partition would start at its log end: moving it to earliest
    # replays nothing it replicated, but moves it back over what it would have skipped
    assert moved(MoveTo("earliest"), "latest")[1] == (1, None, 30, 0, None, 30)


def test_plan_to_a_time_takes_the_first_record_at_or_after_it_else_the_log_end() -> None:
    plan = plan_moves(POSITIONS, MoveTo("datetime", timestamp_ms=5), "earliest", at_time={("orders", 0): 70})
    assert [(m.new, m.note) for m in plan] == [(70, ""), (30, "no record at or after that time: the log end")]


def test_plan_to_an_offset_is_kept_within_the_log() -> None:
    assert [m.new for m in plan_moves(POSITIONS, MoveTo("offset", offset=20), "earliest")] == [20, 20]
    below, past = (
        plan_moves(POSITIONS, MoveTo("offset", offset=5), "earliest")[0],
        plan_moves(POSITIONS, MoveTo("offset", offset=500), "earliest")[0],
    )
    assert (below.new, below.note) == (10, "offset 5 is below the log start: the log start")
    assert (past.new, past.note) == (100, "offset 500 is past the log end: the log end")


def test_a_committed_offset_outside_the_log_counts_from_where_the_consumer_resets() -> None:
    purged = PartitionPosition("t", 0, 3, 10, 20)  # committed 3, the log now starts at 10
    assert purged.effective("earliest") == 10 and purged.effective("latest") == 20


def test_parse_datetime_takes_iso_8601_utc_by_default() -> None:
    assert parse_datetime("1970-01-01T00:00:01Z") == 1000 == parse_datetime("1970-01-01T00:00:01")
    assert parse_datetime("1970-01-01T01:00:01+01:00") == 1000
    with pytest.raises(ValueError):
        parse_datetime("yesterday")


def test_connect_offsets_show_the_last_replicated_record_as_mirrormaker_2_stores_it() -> None:
    assert connect_offsets("a", POSITIONS) == {
        "offsets": [{"partition": {"cluster": "a", "topic": "orders", "partition": 0}, "offset": {"offset": 39}}]
    }


def test_a_connect_patch_body_gives_the_next_offset_per_partition() -> None:
    body = {
        "offsets": [
            {"partition": {"cluster": "a", "topic": "orders", "partition": 0}, "offset": {"offset": 49}},
            {"partition": {"cluster": "a", "topic": "orders", "partition": 1}, "offset": None},
        ]
    }
    assert parse_connect_offsets("a", body) == {("orders", 0): 50, ("orders", 1): None}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "the body must be"),
        ({"offsets": [{"partition": {"cluster": "b", "topic": "t", "partition": 0}}]}, "'a', this flow's source"),
        ({"offsets": [{"partition": {"cluster": "a", "topic": "t", "partition": -1}}]}, "partition number"),
        ({"offsets": [{"partition": {"cluster": "a", "topic": "t", "partition": 0}, "offset": {"x": 1}}]}, "N >= -1"),
    ],
)
def test_a_bad_connect_patch_body_is_refused_saying_why(body: object, message: str) -> None:
    with pytest.raises(ConnectOffsetsError, match=message):
        parse_connect_offsets("a", body)


def test_connector_names_are_the_flows_and_mirror_source_connector_where_it_is_one() -> None:
    one, two = [Flow("a", "b")], [Flow("a", "b"), Flow("b", "a")]
    assert connector_flow("a->b", two) == Flow("a", "b") and connector_flow("MirrorSourceConnector", one) == one[0]
    with pytest.raises(LookupError, match="ambiguous here: 2 flows"):
        connector_flow("MirrorSourceConnector", two)
    with pytest.raises(LookupError, match=r"unknown connector 'x': .*a->b, b->a"):
        connector_flow("x", two)


def test_a_flow_of_connector_definitions_answers_to_its_source_connectors_name_too() -> None:
    # GIVEN two flows, one of them defined by connectors whose MirrorSourceConnector is named "west-source"
    two, names = [Flow("a", "b"), Flow("b", "a")], {Flow("a", "b"): "west-source"}
    # THEN each is found by its name or its spelling, and listed by its name where it has one
    assert connector_flow("west-source", two, names) == connector_flow("a->b", two, names) == Flow("a", "b")
    assert connector_names(two, names) == ["west-source", "b->a"]
    with pytest.raises(LookupError, match=r"unknown connector 'x': .*west-source, b->a"):
        connector_flow("x", two, names)


def config(**props: str) -> SrmConfig:
    base = {
        "clusters": "a, b",
        "a.bootstrap.servers": "x:9092",
        "b.bootstrap.servers": "y:9092",
        "a->b.enabled": "true",
    }
    return SrmConfig.from_properties(Properties.of({**base, **props}, "test"))


def test_start_from_follows_the_source_consumers_auto_offset_reset() -> None:
    assert config().start_from("a", "b") == "earliest"
    assert config(**{"a.consumer.auto.offset.reset": "latest"}).start_from("a", "b") == "latest"
    assert config(**{"a->b.consumer.auto.offset.reset": "latest"}).start_from("a", "b") == "latest"
    with pytest.raises(ConfigError, match=r"a\.consumer\.auto\.offset\.reset='none'"):
        config(**{"a.consumer.auto.offset.reset": "none"}).start_from("a", "b")


def test_an_offset_a_move_skipped_gets_no_translation_until_replicated() -> None:
    # GIVEN 0..39 replicated to 0..39, the position moved from 40 to 100, then 100..109 replicated to 40..49
    runs = [Run(0, 0, 40), Run(100, 40, 10)]
    skipped = [(40, 100, "skipped by srm-control replication-offsets at 2025-01-20T09:00:00Z")]
    origin = lambda: Origin(0, True)  # noqa: E731
    # THEN a group in the skipped range gets no checkpoint, saying why; its neighbours translate exactly
    assert translate_checked(runs, 50, origin, None, skipped) == (
        None,
        "offsets 40..99 were never replicated (skipped by srm-control replication-offsets at 2025-01-20T09:00:00Z): "
        "the group's next records are on the source only",
    )
    assert translate_checked(runs, 40, origin, None, skipped)[0] is None
    assert translate_checked(runs, 39, origin, None, skipped) == (39, "")
    assert translate_checked(runs, 100, origin, None, skipped) == (40, "")
    # WHEN the position moved back and the skipped records were replicated after all (runs rewritten from 0)
    again = [Run(0, 50, 110)]
    # THEN they translate again; a purged range never does
    assert translate_checked(again, 50, origin, None, skipped) == (100, "")
    assert translate_checked(again, 50, origin, None, [(40, 100)])[0] is None


def test_a_move_back_counts_records_an_earlier_move_skipped_as_first_copies_not_duplicates() -> None:
    # GIVEN 0..49 replicated, 50..69 skipped by a move, 70..79 replicated; the position at 80 moved back to 0
    move = plan_moves([PartitionPosition("t", 0, 80, 0, 80)], MoveTo("earliest"), "earliest")[0]
    runs = [Run(0, 0, 50), Run(70, 50, 10)]
    counted = replace(move, first_copies=first_copies(move, [(50, 70, "skipped"), (90, 95)], runs))
    # THEN 20 arrive for the first time and 60 are duplicates
    assert (counted.first_copies, counted.replayed) == (20, 60)
    # AND once replicated after all (a run holds them), they count as duplicates like the rest
    assert first_copies(move, [(50, 70, "skipped")], [Run(0, 0, 80)]) == 0
