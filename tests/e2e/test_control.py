"""`srm-control --local` against a running `srm run`: what is replicated changes live, without a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import (
    assert_identical,
    create_topic_with_records,
    numbered_records,
    produce,
    record_count,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import replicating, srm_control, srm_run, wait_log

pytestmark = pytest.mark.e2e

QUIET_INTERVALS = 4  # refresh.topics.interval.seconds is 1 here: several topic syncs pass while nothing may arrive


def flow_status(cwd: Path, flow: str = "a->b") -> dict[str, Any]:
    statuses = json.loads(srm_control(cwd, "status", "--json", "--timeout", "10"))
    return next(s for s in statuses if s["flow"] == flow)


def caught_up(cwd: Path, topics: int) -> bool:
    """The status shows ``topics`` replicated topics and every record committed by their mappings."""
    status = flow_status(cwd)
    return status["topicCount"] == topics and status["lag"] == 0


def test_topics_added_then_removed_then_re_added_while_running(clusters, tmp_path: Path):
    # GIVEN srm run replicating p.base only, and p.extra with records on the source
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("ctl")
    base, extra = f"{p}.base", f"{p}.extra"
    for topic in (base, extra):
        create_topic_with_records(a, topic, 2, 100)

    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": f"{p}\\.base"}}) as run:
        wait_replicated(a, base, b, f"a.{base}", timeout=120)

        # WHEN a pattern selecting p.extra is added
        out = srm_control(tmp_path, "topics", "--source", "a", "--target", "b", "--add", f"{p}\\.extra")
        assert f"a->b topics: {p}\\.base, {p}\\.extra  (was: {p}\\.base)" in out

        # THEN p.extra replicates, identically, and the status shows both topics caught up
        wait_replicated(a, extra, b, f"a.{extra}", timeout=120)
        wait_for(lambda: caught_up(tmp_path, 2), timeout=120, interval=1.0, message="status: 2 topics, lag 0")

        # WHEN the pattern is removed again and more records arrive on both topics
        srm_control(tmp_path, "topics", "--source", "a", "--target", "b", "--remove", f"{p}\\.extra")
        wait_log(run, f"stopped replicating {extra}", timeout=60)
        produce(a, extra, numbered_records(40, 2, extra, start=100))
        produce(a, base, numbered_records(40, 2, base, start=100))

        # THEN p.base keeps replicating while p.extra's new records stay on the source; its copy stays intact
        wait_replicated(a, base, b, f"a.{base}", timeout=120)
        wait_for(lambda: flow_status(tmp_path)["topicCount"] == 1, timeout=60, interval=1.0, message="status: 1 topic")
        time.sleep(QUIET_INTERVALS)
        assert record_count(b, f"a.{extra}") == 100
        assert flow_status(tmp_path)["topicCount"] == 1

        # WHEN it is added back
        srm_control(tmp_path, "topics", "--source", "a", "--target", "b", "--add", f"{p}\\.extra")

        # THEN replication resumes where it stopped: nothing lost, nothing duplicated
        wait_replicated(a, extra, b, f"a.{extra}", timeout=120)
        wait_for(lambda: caught_up(tmp_path, 2), timeout=120, interval=1.0, message="status: 2 topics, lag 0")
        assert run.alive(), run.output()[-3000:]

    assert assert_identical(a, extra, b, f"a.{extra}") == {0: 70, 1: 70}
    assert assert_identical(a, base, b, f"a.{base}") == {0: 70, 1: 70}


def test_flow_disabled_stops_replicating_and_enabled_resumes(clusters, tmp_path: Path):
    # GIVEN srm run replicating a topic, caught up
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("flowctl")
    create_topic_with_records(a, topic, 2, 60)

    with replicating(tmp_path, a, b, topic) as run:
        wait_for(lambda: caught_up(tmp_path, 1), timeout=120, interval=1.0, message="status: lag 0")

        # WHEN the flow is disabled and records keep arriving
        assert srm_control(tmp_path, "flows", "disable", "a->b").startswith("a->b: disabled")
        wait_log(run, "a->b: worker stopped", timeout=60)
        produce(a, topic, numbered_records(60, 2, topic, start=60))

        # THEN nothing more is replicated, the flow says so, and the status shows the backlog
        time.sleep(QUIET_INTERVALS)
        assert record_count(b, f"a.{topic}") == 60
        assert "a->b  no" in srm_control(tmp_path, "flows", "list")
        status = flow_status(tmp_path)
        assert (status["enabled"], status["lag"]) == (False, 60)

        # WHEN it is enabled again / THEN replication resumes without loss or duplicates
        assert srm_control(tmp_path, "flows", "enable", "--source", "a", "--target", "b").startswith("a->b: enabled")
        wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        assert run.alive(), run.output()[-3000:]

    assert assert_identical(a, topic, b, f"a.{topic}") == {0: 60, 1: 60}
