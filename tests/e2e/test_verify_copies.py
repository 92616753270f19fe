"""``srm-control verify`` on the copies a user has: exactly-once, of a compacted topic after the log cleaner ran, past
a recorded data-loss gap, and one MirrorMaker 2 made."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from srm.local.mirrormaker import MirrorMaker
from tests.support.kafka import (
    Rec,
    admin,
    create_topic,
    end_offsets,
    numbered_records,
    produce,
    read_partition,
    record_count,
    unique,
    wait_for,
)
from tests.support.mm2 import mm2_file
from tests.support.runtime import SrmRun, run_cli, write_config
from tests.support.topics import alter_topic

pytestmark = pytest.mark.e2e


def verified(cwd: Path, *args: str, local: bool = True) -> dict[str, Any]:
    where = ("--local",) if local else ()
    done = run_cli("srm-control", *where, "verify", *args, "--json", cwd=cwd, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_exactly_once_copy_verifies_identical(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("vereos")
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(200, 2, topic))
    flow = {"topics": topic, "exactly.once.source.support": "enabled"}
    with SrmRun(write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": flow}), tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == 200, 120, message="replicated")
        produce(a, topic, numbered_records(100, 2, topic, start=200))  # a second transaction per partition
        wait_for(lambda: record_count(b, f"a.{topic}") == 300, 120, message="replicated")

    result = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic)
    # THEN identical, each partition's 150 records paired through the runs across the transaction markers
    assert result["identical"] and [p["compared"] for p in result["partitions"]] == [150, 150]
    assert {p["method"] for p in result["partitions"]} == {"offset runs"}
    assert all(p["duplicates"]["count"] == 0 for p in result["partitions"])
    assert all(p["targetRange"][1] > 150 for p in result["partitions"])  # markers take offsets on the target


def test_compacted_source_verifies_identical_after_the_log_cleaner_ran(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("vercomp")
    compact = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    create_topic(a, topic, 1, compact)
    now = int(time.time() * 1000)

    def round_of(n: int) -> list[tuple[int, Rec]]:
        return [(0, Rec(f"k{i}".encode(), f"v{i}-{n}".encode(), (), now + n * 10 + i)) for i in range(10)]

    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    with SrmRun(config, tmp_path):
        for n in range(3):
            produce(a, topic, round_of(n))
            time.sleep(0.3)  # the next round rolls a new segment: the older ones can be cleaned

        def cleaned() -> bool:
            produce(a, topic, [(0, Rec(b"roll", b"roll", (), int(time.time() * 1000)))])  # rolls the active segment
            return len(read_partition(a, topic, 0)) < end_offsets(a, topic)[0] - 10

        wait_for(cleaned, 120, 2.0, "the source's log cleaner compacted the topic")
        produce(a, topic, [(0, Rec(b"last", b"last", (), int(time.time() * 1000)))])
        wait_for(lambda: read_partition(b, f"a.{topic}", 0)[-1].value == b"last", 120, message="replicated")

    part = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic)["partitions"][0]
    # THEN identical: the copies whose source record the cleaner removed since are counted apart, not as differences
    assert part["missing"]["count"] == part["extra"]["count"] == part["different"]["count"] == 0
    absent = part["absent"]
    assert absent["goneFromSource"] + absent["offsetGaps"] + absent["compactedOnTarget"] > 0, part
    assert part["compared"] + absent["compactedOnTarget"] == len(read_partition(a, topic, 0))


def test_source_truncated_before_replication_reports_the_recorded_data_loss(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("verloss")
    create_topic(a, topic, 1)
    produce(a, topic, numbered_records(10, 1, topic))
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    with SrmRun(config, tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == 10, 120, message="replicated")
    # WHEN records arrive while srm is stopped and the first five of them are purged before it replicates them
    produce(a, topic, numbered_records(10, 1, topic, start=10))
    before = TopicPartition(topic, 0, 15)
    admin(a).delete_records([before])[before].result(30)
    with SrmRun(config, tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == 15, 120, message="the rest replicated")

    # THEN the gap is reported as the recorded data loss, not as a difference
    result = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic)
    part = result["partitions"][0]
    assert result["identical"] and part["compared"] == 5
    assert part["absent"]["goneFromSource"] == 10  # the ten replicated before were purged with them
    assert part["lostRanges"] == [{"start": 10, "end": 15, "reason": ""}]
    assert part["absent"]["dataLoss"] == 5 and part["missing"]["count"] == 0
    text = run_cli(
        "srm-control", "--local", "verify", "--source", "a", "--target", "b", "--from-offset", "0", cwd=tmp_path
    )
    assert "  recorded data loss: source offsets 10..14 purged before they were replicated" in text.stdout.splitlines()


def test_mirror_maker_2_copy_verifies_identical(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("vermm")
    topic = f"{prefix}.orders"
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(300, 2, topic))
    config = mm2_file(tmp_path / "mm2.properties", ("west", "east"), (a, b), prefix)
    mm2 = MirrorMaker(config, tmp_path / "mm2", heap="512m")
    try:
        wait_for(lambda: record_count(b, f"west.{topic}") == 300, 180, 1.0, "MirrorMaker 2 replicated")
    finally:
        mm2.stop()

    # WHEN its copy is verified from the same mm2.properties, without srm's state
    args = ("--config", str(config), "--source", "west", "--target", "east", "--topic", topic)
    result = verified(tmp_path, *args, local=False)
    # THEN identical, through MM2's offset syncs and the records' content
    assert result["identical"] and [p["compared"] for p in result["partitions"]] == [150, 150]
    assert {p["method"] for p in result["partitions"]} == {"offset syncs"}


def test_re_delivered_records_are_duplicates_not_differences(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("verdup")
    create_topic(a, topic, 1)
    records = numbered_records(20, 1, topic)
    produce(a, topic, records)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    with SrmRun(config, tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == 20, 120, message="replicated")
        # WHEN the last ten are replicated again (at-least-once re-delivery, here asked for by an operator)
        command = ("srm-control", "--local", "replication-offsets", "--source", "a", "--target", "b", "--topic", topic)
        moved = run_cli(*command, "--to-offset", "10", "--force-stop", cwd=tmp_path, timeout=120)
        assert moved.returncode == 0, moved.stderr
        wait_for(lambda: record_count(b, f"a.{topic}") == 30, 120, message="replicated again")

    # THEN the first copies are shown as duplicates of their records, and the copy is identical
    part = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic)["partitions"][0]
    assert part["compared"] == 20 and part["duplicates"]["count"] == 10 and part["identical"]
    assert [d["offset"] for d in part["duplicates"]["first"]] == list(range(10, 20))
    assert part["duplicates"]["first"][0]["note"] == "an earlier copy of source offset 10"
    # AND --since starts at the first source record at or after that time
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(records[15][1].timestamp / 1000))
    at += f".{records[15][1].timestamp % 1000:03d}Z"
    since = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic, "--since", at)["partitions"][0]
    assert since["sourceRange"] == [15, 20] and since["compared"] == 5 and since["targetRange"] == [25, 30]


def test_records_the_dead_letter_policy_diverted_are_absent_not_missing(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("verdlq")
    create_topic(a, topic, 1)
    now = int(time.time() * 1000)
    produce(a, topic, [(0, Rec(b"k", b"first", (), now))])
    flow = {"topics": topic, "errors.tolerance": "all"}
    with SrmRun(write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": flow}), tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == 1, 120, message="the first record replicated")
        # WHEN a record too large for the remote topic arrives between two that fit
        alter_topic(b, f"a.{topic}", {"max.message.bytes": "10000"})
        big = Rec(b"k", b"x" * 20_000, (), now + 1)
        produce(a, topic, [(0, big), (0, Rec(b"k", b"last", (), now + 2))])
        wait_for(lambda: record_count(b, f"a.{topic}") == 2, 120, message="the last record replicated")
        assert list((tmp_path / ".srm-local" / "dead-letters").rglob("*.json")), "no dead letter written"

    # THEN the diverted record is accounted for as dead-lettered, and the copy is identical
    part = verified(tmp_path, "--source", "a", "--target", "b", "--topic", topic)["partitions"][0]
    assert part["identical"] and part["compared"] == 2 and part["absent"]["deadLettered"] == 1
