"""Source positions read and moved on a running ``srm run``: refused while replicating, to the latest record, back
to a time and to the earliest, with what the target gets each time; the Connect-shaped offsets API read over plain
HTTP; translation refusing a group inside a skipped range."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from srm.core.plans import mapping_group_id
from tests.support.kafka import (
    admin,
    create_topic,
    numbered_records,
    produce,
    read_topic,
    rewind,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import SrmRun, group_offsets, http, run_cli, srm_control, write_config

pytestmark = pytest.mark.e2e


def offsets_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``replication-offsets`` of flow a->b (``--topic`` among ``args``: the flow replicates heartbeats too)."""
    command = ("srm-control", "--local", "replication-offsets", "--source", "a", "--target", "b", *args)
    return run_cli(*command, cwd=cwd, timeout=120)


def moved(cwd: Path, *args: str) -> dict[str, Any]:
    done = offsets_cli(cwd, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_positions_are_read_and_moved_and_the_target_gets_what_each_move_says(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = unique("pos"), unique("billing")
    create_topic(a, topic, 2)
    initial, skipped, post = (numbered_records(n, 2, topic, start) for n, start in ((100, 0), (40, 100), (20, 140)))
    produce(a, topic, initial)
    config = write_config(
        tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}}, **{"emit.checkpoints.interval.seconds": 1}
    )
    mine = ("--topic", topic)
    with SrmRun(config, tmp_path, api=True) as run:
        wait_replicated(a, topic, b, f"a.{topic}", timeout=120)

        # GIVEN replication running: its positions read, and over plain HTTP in Connect's shape (MM2's offsets: the
        # last replicated record's)
        wait_for(
            lambda: (
                [(p["position"], p["logEnd"]) for p in moved(tmp_path, *mine)["partitions"]] == [(50, 50), (50, 50)]
            ),
            timeout=30,
            message="positions at the log ends",
        )
        api = (tmp_path / ".srm-local" / "api.url").read_text().strip()
        url = f"{api}/connectors/{urllib.parse.quote('a->b')}/offsets"
        status, shown = http("GET", url)
        connect = [
            {"partition": {"cluster": "a", "topic": topic, "partition": p}, "offset": {"offset": 49}} for p in (0, 1)
        ]
        assert status == 200 and [o for o in shown["offsets"] if o["partition"]["topic"] == topic] == connect
        # … heartbeats replicated as data (their topic may be new, its mapping a moment behind; the clusters are shared
        # with other tests, whose heartbeats topics the flow replicates too)
        wait_for(
            lambda: {o["partition"]["topic"] for o in http("GET", url)[1]["offsets"]} >= {topic, "heartbeats"},
            timeout=30,
            message="the heartbeats' position",
        )
        assert http("GET", f"{api}/connectors/MirrorSourceConnector/offsets")[0] == 200  # the one flow
        status, missing = http("GET", f"{api}/connectors/nope/offsets")
        assert status == 404 and "unknown connector 'nope'" in missing["message"]

        # WHEN a move is asked while it replicates, THEN it is refused in one line (and over the API as Connect does)
        refused = offsets_cli(tmp_path, *mine, "--to-earliest")
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "a->b is replicating" in refused.stderr and "--force-stop" in refused.stderr
        body = {"offsets": [{"partition": {"cluster": "a", "topic": topic, "partition": 0}, "offset": {"offset": 9}}]}
        status, answer = http("PATCH", url, body)
        assert status == 400 and "a->b is replicating" in answer["message"]

        # WHEN the flow is stopped, records arrive, and it is moved to the latest record
        srm_control(tmp_path, "flows", "disable", "a->b")
        wait_for(lambda: not _members(a, topic), timeout=60, message="the mapping's group empty")
        produce(a, topic, skipped)
        dry = moved(tmp_path, *mine, "--to-latest", "--dry-run")
        assert dry["dryRun"] and dry["skipped"] == 40 and moved(tmp_path, *mine)["partitions"][0]["position"] == 50
        latest = moved(tmp_path, *mine, "--to-latest")
        # THEN the 40 records that arrived meanwhile are skipped: never replicated
        assert (latest["skipped"], latest["replayed"]) == (40, 0)
        assert [(m["old"], m["new"]) for m in latest["partitions"]] == [(50, 70), (50, 70)]
        srm_control(tmp_path, "flows", "enable", "a->b")
        t_post = min(r.timestamp for _, r in post)
        produce(a, topic, post)
        wait_for(lambda: sum(len(v) for v in read_topic(b, f"a.{topic}").values()) >= 120, timeout=120)

        # AND a consumer group whose committed offset lies among the skipped records gets no checkpoint, and why
        rewind(a, group, topic, 2, 60)
        why = wait_for(
            lambda: "never replicated" in (o := group_offsets(tmp_path, group)).stdout + o.stderr and o,
            timeout=60,
            message="srm-control offsets saying why",
        )
        said = why.stderr + why.stdout
        assert f"{topic}-0: the group's committed offset 60 on a has no checkpoint" in said
        assert "offsets 50..69 were never replicated (skipped by srm-control replication-offsets" in said

        # WHEN it is moved back to a time while running, with --force-stop
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_post // 1000)) + f".{t_post % 1000:03d}Z"
        back = moved(tmp_path, *mine, "--to-datetime", at, "--force-stop")
        # THEN the flow was stopped and started again, and the 10 records per partition since then come again
        assert back["paused"] and (back["skipped"], back["replayed"]) == (0, 20)
        assert [(m["old"], m["new"]) for m in back["partitions"]] == [(80, 70), (80, 70)]
        wait_for(lambda: sum(len(v) for v in read_topic(b, f"a.{topic}").values()) >= 140, timeout=120)

        # WHEN it is moved back to the earliest record
        earliest = moved(tmp_path, *mine, "--to-earliest", "--force-stop")
        # THEN what was replicated comes again (duplicates), and the skipped records for the first time
        assert (earliest["replayed"], [m["firstCopies"] for m in earliest["partitions"]]) == (120, [20, 20])
        assert [m["new"] for m in earliest["partitions"]] == [0, 0]
        wait_for(lambda: sum(len(v) for v in read_topic(b, f"a.{topic}").values()) >= 300, timeout=120)
        # AND the group's offset, replicated now, translates again
        wait_for(lambda: "never replicated" not in (o := group_offsets(tmp_path, group)).stderr and o.returncode == 0)
        assert run.alive(), run.output()[-3000:]

    # THEN each partition of the target holds, in order: the first 50, the 10 after the skipped ones, those 10 again
    # (the move back to a time: 10 duplicates), then all 80 (the move to the earliest: 60 duplicates, and the 20
    # skipped records for the first time)
    source, target = read_topic(a, topic), read_topic(b, f"a.{topic}")
    for p in (0, 1):
        src = [r.content() for r in source[p]]
        assert [r.content() for r in target[p]] == src[:50] + src[70:] + src[70:] + src
    # AND the duplicates are exactly those the moves announced
    duplicates = sum(len(target[p]) - len({r.content() for r in target[p]}) for p in (0, 1))
    assert duplicates == back["replayed"] + earliest["replayed"] == 140


def _members(bootstrap: str, topic: str) -> int:
    group = mapping_group_id("a", "b", topic)
    return len(admin(bootstrap).describe_consumer_groups([group], request_timeout=10)[group].result().members)


def test_an_exactly_once_flow_moved_back_replicates_the_records_again_as_the_move_says(
    clusters, tmp_path: Path
) -> None:
    # GIVEN an exactly-once flow that replicated 50 records per partition (its position kept with its transactions too)
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("eos-pos")
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(100, 2, topic))
    flow = {"topics": topic, "exactly.once.source.support": "enabled"}
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": flow})
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        wait_for(
            lambda: [p["position"] for p in moved(tmp_path, "--topic", topic)["partitions"]] == [50, 50],
            timeout=30,
            message="positions at the log ends",
        )
        # WHEN it is moved back to the earliest record while running (--force-stop: its workers stay warm)
        back = moved(tmp_path, "--topic", topic, "--to-earliest", "--force-stop")
        # THEN the move says every record comes again, and the target gets exactly that
        assert back["paused"] and (back["skipped"], back["replayed"]) == (0, 100)
        wait_for(lambda: sum(len(v) for v in read_topic(b, f"a.{topic}").values()) >= 200, timeout=120)
        produce(a, topic, numbered_records(20, 2, topic, start=100))
        wait_for(lambda: sum(len(v) for v in read_topic(b, f"a.{topic}").values()) >= 220, timeout=120)
        time.sleep(2)  # anything more would be a duplicate the move did not announce
        assert run.alive(), run.output()[-3000:]
    source, target = read_topic(a, topic), read_topic(b, f"a.{topic}")
    for p in (0, 1):
        src = [r.content() for r in source[p]]
        assert [r.content() for r in target[p]] == src[:50] + src
