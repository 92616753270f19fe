"""The local worker's watchdog for scheduled functions, on a moto store: a function whose runs keep failing for
longer than the bound is a stall — logged, recorded in the flow status and shown by ``srm-control status`` — until
a run succeeds; one failure is not."""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid

import boto3
import pytest

import srm.cli.control as cli
from srm.app import App, Environment
from srm.control.edits import Control
from srm.local.threads import thread_dump
from srm.local.worker import Scheduled, Watchdog, _invoke
from srm.state import StateStore
from tests.unit.fake_clusters import FakeProbe

BOUND_S = 0.2


class Flaky:
    def __init__(self) -> None:
        self.failing = True

    def __call__(self, _event: object, _context: object) -> None:
        if self.failing:
            raise RuntimeError("cluster b does not answer")


@pytest.fixture
def app(control: Control, state: StateStore) -> App:
    return App(
        Environment("a", "b", state_table=state.table), dynamodb=boto3.client("dynamodb", region_name="us-east-1")
    )


def test_function_failing_longer_than_the_bound_is_a_stall_until_it_succeeds(
    app: App,
    control: Control,
    state: StateStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
):
    handler = Flaky()
    job = Scheduled("checkpoint", handler, lambda _c: 1.0)
    watchdog = Watchdog(app, BOUND_S)

    # GIVEN one failed run: not a stall, even once the bound has passed
    _invoke(job, "a", "b")
    time.sleep(BOUND_S * 1.5)
    assert watchdog.check({}, [job]) == {}

    # WHEN it fails again
    with caplog.at_level(logging.WARNING, logger="srm.local.worker"):
        _invoke(job, "a", "b")
        stalls = watchdog.check({}, [job])

    # THEN it is stalled since its first failed run: logged, and in the flow status and srm-control status
    stall = stalls["function checkpoint"]
    assert stall.reason == "every run fails: cluster b does not answer"
    assert job.failing_since_ms == stall.since_ms
    assert "a->b: function checkpoint stalled since" in caplog.text
    [ab] = control.status(FakeProbe(), state, [("a", "b")])
    assert [(s.what, s.since_ms, s.reason) for s in ab.stalled] == [
        ("function checkpoint", stall.since_ms, stall.reason)
    ]
    monkeypatch.setattr(cli, "KafkaStatusProbe", lambda *a, **k: FakeProbe())
    out = io.StringIO()
    assert cli.main(["status", "--source", "a", "--target", "b"], out=out, err=io.StringIO()) == 0
    assert "a->b: function checkpoint stalled since 20" in out.getvalue()
    assert "every run fails: cluster b does not answer" in out.getvalue()

    # WHEN a run succeeds, the stall is over: logged, and gone from the status
    handler.failing = False
    with caplog.at_level(logging.WARNING, logger="srm.local.worker"):
        _invoke(job, "a", "b")
        assert watchdog.check({}, [job]) == {}
    assert "a->b: function checkpoint recovered after" in caplog.text
    [ab] = control.status(FakeProbe(), state, [("a", "b")])
    assert ab.stalled == () and ab.to_dict()["stalled"] == []


def test_thread_dump_names_each_thread_and_where_it_waits():
    # GIVEN a thread blocked in a call that does not return
    release = threading.Event()

    def stuck_in_a_call() -> None:
        release.wait()

    name = f"stuck-{uuid.uuid4().hex[:8]}"  # a worker's own pools (srm-commit_0 …) may be running beside it
    blocked = threading.Thread(target=stuck_in_a_call, name=name)
    blocked.start()
    try:
        # THEN the dump has a line for it, naming the function it waits in, and one for this thread
        lines = thread_dump().splitlines()
    finally:
        release.set()
        blocked.join(5)
    [mine] = [line for line in lines if line.strip().startswith(f"{name}:")]
    assert "stuck_in_a_call" in mine and "threading.py" in mine.split(" <- ")[0], mine
    me = threading.current_thread().name
    assert any(line.strip().startswith(f"{me}:") and "thread_dump" in line for line in lines), lines
