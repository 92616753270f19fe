"""A topic that stalls while another flows (a record the target refuses holds its partition, errors.tolerance none):
the checkpoint function's sample finds its oldest unreplicated record growing old and records the topic stalled,
naming it alone; `srm-control status` shows both the stall and each topic's oldest unreplicated record; once the
refusal is lifted the topic replicates again and the stall clears."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest

from tests.support.kafka import Rec, create_topic, produce, unique, wait_for, wait_replicated
from tests.support.runtime import srm_control, srm_run, wait_log
from tests.support.topics import alter_topic

pytestmark = pytest.mark.e2e

THRESHOLD_S = 3  # topic.stalled.threshold.seconds
REFUSED = 20_000  # bytes: above the stuck remote topic's max.message.bytes while the test holds it there


def status(workdir: Path) -> dict:
    [flow] = json.loads(srm_control(workdir, "status", "--json"))
    return flow


def oldest(workdir: Path) -> dict[str, str | None]:
    """Each topic's oldest record not yet replicated, as status says it."""
    return {t["topic"]: t["oldestUnreplicated"] for t in status(workdir)["topics"]}


def record(value: bytes) -> Rec:
    return Rec(b"k", value, (), int(time.time() * 1000))


def test_a_stalled_topic_is_named_alone_while_another_flows(clusters, tmp_path: Path):
    # GIVEN two topics replicated a->b, lag sampled every second, a topic stalled after 3 s
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("stall")
    flowing, stuck = f"{p}.flowing", f"{p}.stuck"
    for topic in (flowing, stuck):
        create_topic(a, topic, 1)
    flow = {
        "topics": f"{p}\\..*",
        "emit.checkpoints.interval.seconds": 1,
        "topic.stalled.threshold.seconds": THRESHOLD_S,
        "mirror.delivery.timeout.ms": 2000,
        # the shared clusters' heartbeats topic carries other tests' group positions: only the two topics here
        "heartbeats.replication.enabled": "false",
    }
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}) as run:
        for topic in (flowing, stuck):
            produce(a, topic, [(0, record(b"first"))])
            wait_replicated(a, topic, b, f"a.{topic}", timeout=60)

        # WHEN the stuck topic's next record is one its remote topic refuses, while the other keeps receiving
        alter_topic(b, f"a.{stuck}", {"max.message.bytes": "10000"})
        refused = record(b"x" * REFUSED)
        produce(a, stuck, [(0, refused)])
        deadline = time.monotonic() + 30
        sent = 1
        while time.monotonic() < deadline and not status(tmp_path)["stalled"]:
            produce(a, flowing, [(0, record(f"live {sent}".encode()))])
            sent += 1
            time.sleep(0.5)

        # THEN the stuck topic alone is stalled, named with its oldest unreplicated record's age and the threshold
        seen = status(tmp_path)
        assert [s["what"] for s in seen["stalled"]] == [f"topic {stuck}"], seen
        assert "topic.stalled.threshold.seconds = 3" in seen["stalled"][0]["reason"]
        wait_log(run, f"topic {stuck} stalled", timeout=10)
        # … and status shows each topic's oldest record not yet replicated: the refused one; none once the other
        # has caught up
        wait_replicated(a, flowing, b, f"a.{flowing}", timeout=30)
        wait_for(lambda: oldest(tmp_path)[flowing] is None, timeout=30, message=f"{flowing} caught up")
        assert abs(_ms(oldest(tmp_path)[stuck]) - refused.timestamp) < 1_000
        text = srm_control(tmp_path, "status", "--topics")
        assert f"a->b: topic {stuck} stalled since" in text, text

        # WHEN the remote topic takes the record again THEN it is replicated and the stall clears
        alter_topic(b, f"a.{stuck}", {"max.message.bytes": str(10 * REFUSED)})
        wait_replicated(a, stuck, b, f"a.{stuck}", timeout=60)
        wait_for(lambda: not status(tmp_path)["stalled"], timeout=30, message="the stall cleared")
        wait_log(run, f"topic {stuck} replicates again", timeout=10)
        assert run.alive(), run.output()[-2000:]


def _ms(iso: str | None) -> float:
    assert iso is not None
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")) * 1000.0
