"""``srm-control verify`` on real copies: srm's (at-least-once with a transform chain, exactly-once), with each kind of
tampering on the target named by offset, and bad input refused in one line."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.support.kafka import (
    Rec,
    admin,
    create_topic,
    list_topic_names,
    numbered_records,
    produce,
    read_partition,
    record_count,
    unique,
    wait_for,
)
from tests.support.runtime import SrmRun, run_cli, srm_control, write_config

pytestmark = pytest.mark.e2e

TRANSFORMS = {
    "transforms": "drop-tombstones,origin",
    "transforms.drop-tombstones.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.drop-tombstones.predicate": "is-tombstone",
    "transforms.origin.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.origin.header": "origin",
    "transforms.origin.value.literal": "a",
    "predicates": "is-tombstone",
    "predicates.is-tombstone.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
}


def verify(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("srm-control", "--local", "verify", "--source", "a", "--target", "b", *args, cwd=cwd, timeout=240)


def verified(cwd: Path, *args: str, status: int = 0) -> dict[str, Any]:
    done = verify(cwd, *args, "--json")
    assert done.returncode == status, done.stdout + done.stderr
    return json.loads(done.stdout)


def only(result: dict[str, Any]) -> dict[str, Any]:
    (partition,) = result["partitions"]
    return partition


def firsts(finding: dict[str, Any]) -> list[int]:
    return [f["offset"] for f in finding["first"]]


def rewrite(bootstrap: str, topic: str, edit) -> None:
    """The topic recreated holding ``edit(its records)``: a copy rewritten by someone else (a faulty restore from a
    backup, say), offsets kept where the edit keeps the count. Kafka cannot change a record in place."""
    records = read_partition(bootstrap, topic, 0)
    admin(bootstrap).delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in list_topic_names(bootstrap), 30, message=f"{topic} deleted")
    wait_for(lambda: _recreated(bootstrap, topic), 60, 0.5, f"{topic} recreated")
    produce(bootstrap, topic, [(0, r) for r in edit(records)])


def _recreated(bootstrap: str, topic: str) -> bool:
    try:
        create_topic(bootstrap, topic, 1)
        return True
    except Exception:  # the deletion is still being completed on the broker
        return False


def test_srm_copy_verifies_identical_then_each_tampering_is_named_by_offset(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("ver")
    clean, over, gone, dup, moved = (f"{prefix}.{n}" for n in ("clean", "over", "gone", "dup", "moved"))
    for topic in (clean, over, gone, dup, moved):
        create_topic(a, topic, 1)
        produce(a, topic, numbered_records(20, 1, topic))
    tombstone = Rec(b"gone-key", None, (), int(time.time() * 1000))
    produce(a, clean, [(0, tombstone)])
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": f"{prefix}\\..*", **TRANSFORMS}})
    with SrmRun(config, tmp_path) as run:
        for topic in (clean, over, gone, dup, moved):
            wait_for(lambda t=topic: record_count(b, f"a.{t}") == 20, 120, message=f"a.{topic} replicated")
        # a copy of the record at offset 2 appended on the target by someone else, then replication goes on
        appended = read_partition(b, f"a.{dup}", 0)[2]
        produce(b, f"a.{dup}", [(0, appended)])
        produce(a, dup, numbered_records(5, 1, dup, start=20))
        wait_for(lambda: record_count(b, f"a.{dup}") == 26, 120, message="the later records replicated")
        assert run.alive(), run.output()[-3000:]

    # WHEN the clean copy is verified, THEN it is identical, the tombstone the chain dropped accounted for
    result = verified(tmp_path, "--topic", clean)
    part = only(result)
    assert result["identical"] and result["verdict"].startswith("a->b: IDENTICAL")
    assert (part["method"], part["compared"], part["sourceRange"], part["targetRange"]) == (
        "offset runs",
        20,
        [0, 21],
        [0, 20],
    )
    assert part["absent"]["droppedByTransform"] == 1 and len(part["digest"]) == 64
    # AND status shows how far the flow is verified
    flows = json.loads(srm_control(tmp_path, "status", "--json"))
    assert {"topic": clean, "partition": 0, "nextOffset": 21} in flows[0]["verifiedThrough"]
    # AND the next run continues where this one stopped: nothing new to compare; --from-offset 0 starts over
    assert only(verified(tmp_path, "--topic", clean))["compared"] == 0
    again = only(verified(tmp_path, "--topic", clean, "--from-offset", "0"))
    assert again["compared"] == 20 and again["digest"] == part["digest"]

    # WHEN the target is tampered with
    rewrite(
        b, f"a.{over}", lambda rs: [*rs[:7], Rec(rs[7].key, b"overwritten", rs[7].headers, rs[7].timestamp), *rs[8:]]
    )
    rewrite(b, f"a.{moved}", lambda rs: [*rs[:4], rs[5], rs[4], *rs[6:]])
    low = TopicPartition(f"a.{gone}", 0, 3)
    admin(b).delete_records([low])[low].result(30)

    # THEN verify names each by offset, exit 1
    overwritten = only(verified(tmp_path, "--topic", over, status=1))
    assert firsts(overwritten["different"]) == [7] and overwritten["compared"] == 19
    assert "value" in overwritten["different"]["first"][0]["note"]
    deleted = only(verified(tmp_path, "--topic", gone, status=1))
    assert firsts(deleted["missing"]) == [0, 1, 2] and deleted["compared"] == 17
    duplicated = only(verified(tmp_path, "--topic", dup, status=1))
    assert firsts(duplicated["extra"]) == [20] and duplicated["compared"] == 25
    assert "duplicate of source offset 2" in duplicated["extra"]["first"][0]["note"]
    reordered = only(verified(tmp_path, "--topic", moved, status=1))
    assert firsts(reordered["different"]) == [4, 5] and reordered["compared"] == 18
    assert all("out of order" in f["note"] for f in reordered["different"]["first"])

    # AND the text output says the same, one verdict line for the flow
    text = verify(tmp_path, "--topic", f"{prefix}\\.(over|clean)", "--from-offset", "0")
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    assert "  different: target offset 7: source offset 7: value differ" in lines
    assert lines[-1].startswith("a->b: DIFFERENT (39 records compared in 2 partitions; 1 different)")


@pytest.mark.parametrize(
    "args, message",
    [
        (("--source", "a", "--target", "c"), "unknown cluster alias 'c'"),
        (("--source", "b", "--target", "a"), "unknown flow b->a"),
        (("--source", "a", "--target", "b", "--topic", "nope"), "replicates no topic matching 'nope'"),
        (("--source", "a", "--target", "b", "--partition", "7"), "partition 7 is out of range"),
        (("--source", "a", "--target", "b", "--sample", "2"), "--sample 2 is not a fraction"),
    ],
    ids=["unknown-alias", "unknown-flow", "topic-not-replicated", "partition-out-of-range", "bad-sample"],
)
def test_bad_input_is_one_line_and_exit_2(clusters, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("verbad")
    create_topic(a, topic, 1)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    done = run_cli("srm-control", "verify", "--config", str(config), *args, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_continuous_verification_follows_replication_and_reports_a_difference(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("vercont")
    create_topic(a, topic, 1)
    produce(a, topic, numbered_records(50, 1, topic))
    flow = {"topics": topic, "verify.interval.seconds": 1}
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": flow})

    def status() -> dict[str, Any]:
        done = run_cli("srm-control", "--local", "status", "--json", cwd=tmp_path)
        return json.loads(done.stdout)[0] if done.returncode == 0 else {}  # not started yet: nothing known

    def verified_through() -> int | None:
        found = [v["nextOffset"] for v in status().get("verifiedThrough", ()) if v["topic"] == topic]
        return found[0] if found else None

    with SrmRun(config, tmp_path) as run:
        # GIVEN continuous verification on, THEN what is replicated is verified, and what arrives after it too
        wait_for(lambda: verified_through() == 50, 120, 1.0, "the first 50 records verified")
        produce(a, topic, numbered_records(30, 1, topic, start=50))
        wait_for(lambda: verified_through() == 80, 120, 1.0, "the next 30 verified")
        assert status()["verificationDifferences"] == 0
        # WHEN a record no source record explains lands on the target among replicated ones
        produce(b, f"a.{topic}", [(0, Rec(b"intruder", b"intruder", (), int(time.time() * 1000)))])
        produce(a, topic, numbered_records(10, 1, topic, start=80))
        # THEN the next runs report the difference, and the verified position stays before it
        wait_for(lambda: status().get("verificationDifferences") == 1, 120, 1.0, "the difference reported")
        assert verified_through() == 80
        assert "VERIFICATION found 1 differences" in srm_control(tmp_path, "status")
        assert run.alive(), run.output()[-3000:]
