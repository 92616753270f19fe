"""`srm run`'s log says a thing once per change of state: a flow replicating steadily for a minute, its scheduled
functions running every second, repeats no line more than a few times: no INFO line, nor a WARNING or ERROR said at
each run."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from tests.support.groups import Squatter
from tests.support.kafka import (
    Rec,
    admin,
    create_topic,
    produce,
    rewind,
    topic_partitions,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import srm_run, wait_log

pytestmark = pytest.mark.e2e

MINUTE_S = 60
MOST = 3  # a line said again when its state comes back is fine; one said at every run of a schedule is not
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def _said(line: str) -> tuple[str, str] | None:
    """A log line's level and message: the runtime's text lines, and the handlers' JSON ones (Powertools)."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        return (record["level"], record["message"]) if isinstance(record, dict) and "level" in record else None
    stamped = _STAMP.match(line)
    if stamped is None:
        return None
    level, _, message = line[stamped.end() :].partition(" ")
    return level, message


def _repeated(output: str) -> dict[str, int]:
    """The lines said more than a few times, but at DEBUG."""
    said = Counter(f"{level} {message}" for level, message in filter(None, map(_said, output.splitlines())))
    return {line: n for line, n in said.items() if n > MOST and not line.startswith("DEBUG")}


def _listing(repeated: dict[str, int]) -> str:
    return "\n".join(f"{n}x {line}" for line, n in sorted(repeated.items(), key=lambda i: -i[1]))


def set_retention(bootstrap: str, topic: str, ms: str) -> None:
    entry = ConfigEntry("retention.ms", ms, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin(bootstrap).incremental_alter_configs([resource]).values():
        future.result(30)


def test_a_steady_flow_says_nothing_over_and_over(clusters, tmp_path: Path):
    # GIVEN a flow replicating a topic and checkpointing a group, every scheduled function running every second
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = unique("quiet"), unique("quiet-group")
    create_topic(a, topic, 2)
    every_second = {
        "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.interval.seconds": 1,
        "refresh.topics.interval.seconds": 1,
        "refresh.groups.interval.seconds": 1,
        "sync.topic.configs.interval.seconds": 1,
        "sync.topic.acls.interval.seconds": 1,
        "emit.heartbeats.interval.seconds": 1,
        "verify.interval.seconds": 1,
    }
    flow = {"topics": topic, "groups": group}
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}, **every_second) as run:
        wait_log(run, "a->b: worker started", timeout=60)
        # WHEN records keep arriving for a minute, the group following them on the source, and the group is active on
        # the target for a while in the middle of it (its offsets left alone), then idle again (synced); the source
        # topic's config changes once its remote topic exists (synced to it)
        deadline = time.monotonic() + MINUTE_S
        sent = 0
        squatter: Squatter | None = None
        retention_set = False
        while time.monotonic() < deadline:
            produce(a, topic, [(sent % 2, Rec(b"k", f"r{sent}".encode(), (), int(time.time() * 1000)))])
            sent += 1
            rewind(a, group, topic, 2, sent // 2)
            left = deadline - time.monotonic()
            if not retention_set and left < MINUTE_S * 5 / 6:
                wait_for(lambda: topic_partitions(b, f"a.{topic}") == 2, 30, message="the remote topic")
                set_retention(a, topic, "86400000")
                retention_set = True
            if squatter is None and MINUTE_S * 2 / 3 > left > MINUTE_S / 3:
                squatter = Squatter(b, group, f"a.{topic}")
            elif squatter is not None and left < MINUTE_S / 3:
                squatter.leave()
                squatter = None
            time.sleep(0.5)
        if squatter is not None:
            squatter.leave()
        wait_replicated(a, topic, b, f"a.{topic}", timeout=60)
        wait_for(lambda: f"group {group} is idle on b again" in run.output(), 30, message="the group synced again")
        assert run.alive(), run.output()[-3000:]
        output = run.output()

    # THEN no line was said more than a few times
    assert f"group {group} is active on b" in output  # the minute saw the group's both states
    assert f"topic a.{topic}: config retention.ms=86400000" in output
    assert _repeated(output) == {}, _listing(_repeated(output))
