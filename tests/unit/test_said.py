"""A log that says a thing once per change of state: :class:`srm.core.said.Said`, and the worker's lines built on it
(a scheduled function that keeps failing, the status line of an idle flow)."""

from __future__ import annotations

import logging

import pytest

from srm.core.said import Said
from srm.local.worker import Scheduled, _invoke, _log_status


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_said_a_statement_once_until_it_changes() -> None:
    said = Said()
    assert said.tell("group g", "active") == ""
    assert said.tell("group g", "active") is None
    assert said.tell("group h", "active") == ""  # another subject
    assert said.tell("group g", "idle") == ""
    assert said.tell("group g", "idle") is None


def test_said_a_persisting_problem_again_after_a_while_with_how_often_it_held() -> None:
    clock = Clock()
    said = Said(clock)
    assert said.tell("t", "refused") == ""
    for _ in range(3):
        clock.now += 60
        assert said.tell("t", "refused", again_after_s=300) is None
    clock.now += 300
    assert said.tell("t", "refused", again_after_s=300) == " (still; 4 time(s) in the last 5 min)"
    clock.now += 10_000
    assert said.tell("t", "refused", again_after_s=None) is None  # a state, not a problem: never said again


def test_said_say_logs_a_problem_when_it_starts_changes_and_every_while_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    said, log = Said(clock), logging.getLogger("test.said")
    caplog.set_level(logging.INFO, logger="test.said")
    told = [said.say("t", "refused", log.warning, "cannot alter %s: %s", "t", "refused") for _ in range(3)]
    clock.now += 300
    told.append(said.say("t", "refused", log.warning, "cannot alter %s: %s", "t", "refused"))
    told.append(said.say("t", "gone", log.warning, "cannot alter %s: %s", "t", "gone"))
    assert told == [True, False, False, True, True]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "cannot alter t: refused"),
        ("WARNING", "cannot alter t: refused (still; 3 time(s) in the last 5 min)"),
        ("WARNING", "cannot alter t: gone"),
    ]


def test_said_ended_says_whether_anything_was_said() -> None:
    said = Said()
    assert not said.ended("t")
    said.tell("t", "refused")
    assert said.ended("t")
    assert said.tell("t", "refused") == ""  # it came back: new again


def test_a_function_failing_at_every_run_is_said_once_and_its_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a scheduled function failing three runs in a row, then succeeding twice
    failing = [True, True, True, False, False]

    def handler(_event: object, _context: object) -> None:
        if failing.pop(0):
            raise RuntimeError("cluster b does not answer")

    job = Scheduled("said-test", handler, lambda _config: 1.0)
    # WHEN it runs five times
    with caplog.at_level(logging.INFO, logger="srm.local.worker"):
        for _ in range(5):
            _invoke(job, "a", "b")
    # THEN the failure is said once, and so is its end
    assert [r.getMessage() for r in caplog.records] == [
        "a->b said-test failed (retried next interval): cluster b does not answer",
        "a->b said-test succeeds again after 3 failed run(s)",
    ]


def test_an_idle_flows_status_line_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="srm.local.worker"):
        for _ in range(3):
            _log_status("said-a", "said-b", {}, {})
    assert [r.getMessage() for r in caplog.records] == ["said-a->said-b: 0 topic(s), 0 record(s) replicated"]
