"""The verify function's handler in-process, as Lambda runs it (``srm run``'s scheduler calls the same one): flow a->b
on the shared clusters, its tables on moto, records replicated by the mirror handler, then verified by scheduled runs
that are due or not, bounded by the invocation's remaining time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from srm.control.verify import STARTED_FACT
from srm.core.verification import verified_positions
from srm.handlers import mirror, verify
from srm.local.context import LocalContext
from srm.metrics.model.schema import VerificationRun, decode
from tests.support.events import load_event
from tests.support.handler import HandlerFlow, kafka_event
from tests.support.kafka import Rec, create_topic_with_records, numbered_records, produce, read_topic, unique

pytestmark = pytest.mark.integration

CONTEXT = LocalContext("srm-a-b-verify")


class NoTimeLeft(LocalContext):
    """An invocation at the end of its time: the deadline has passed before the first partition."""

    def get_remaining_time_in_millis(self) -> int:
        return 0


@pytest.fixture
def flow(handler_flow: HandlerFlow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[HandlerFlow, str]:
    """A 2-partition topic of 30 records (15 each) replicated by the mirror handler; verification every hour; raw
    metric records to files under ``tmp_path``."""
    monkeypatch.setenv("SRM_METRICS_DIR", str(tmp_path))
    prefix = unique("ver")
    handler_flow.configure(prefix, {"verify.interval.seconds": "3600"})
    topic = f"{prefix}.orders"
    create_topic_with_records(handler_flow.a, topic, 2, 30)
    records = read_topic(handler_flow.a, topic)
    assert {p: len(r) for p, r in records.items()} == {0: 15, 1: 15}
    assert mirror.lambda_handler(kafka_event(handler_flow.a, topic, records), CONTEXT)["records"] == 30
    return handler_flow, topic


def _due_again(flow: HandlerFlow) -> None:
    """As if the interval had passed since the last run started."""
    flow.state.update_flow_status("a", "b", **{STARTED_FACT: 0})


def _raw_runs(folder: Path) -> list[VerificationRun]:
    lines = [line for f in sorted((folder / "raw").rglob("*.jsonl")) for line in f.read_text().splitlines()]
    return [r for r in map(decode, lines) if isinstance(r, VerificationRun)]


def _emf(out: str) -> dict[tuple[str, str | None], float]:
    """(metric, topic) → value of the EMF documents printed."""
    found = {}
    for line in out.splitlines():
        doc: dict[str, Any] = json.loads(line) if line.startswith("{") else {}
        for directive in doc.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive["Metrics"]:
                (value,) = doc[metric["Name"]]  # Powertools prints each metric's values as a list
                found[(metric["Name"], doc.get("Topic"))] = value
    return found


def test_a_due_run_verifies_what_was_replicated_and_the_next_tick_waits_for_the_interval(
    flow: tuple[HandlerFlow, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    handler_flow, topic = flow
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    # WHEN the schedule's event reaches the verify function, no run having started before
    answer = verify.lambda_handler(load_event("schedule.json"), CONTEXT)
    # THEN it compared every replicated record of both partitions, identical, and keeps how far each is verified
    assert answer == {
        "verified": True,
        "compared": 30,
        "differences": 0,
        "identical": True,
        "partitions": 2,
        "deferred": 0,
    }
    facts = handler_flow.state.flow_status("a", "b")
    assert verified_positions(facts) == {(topic, 0): (15, 15), (topic, 1): (15, 15)}
    assert facts["verification_differences"] == 0
    # and published what it found, per topic and for the flow, and a raw record per partition
    emf = _emf(capsys.readouterr().out)
    assert {k: v for k, v in emf.items() if k[0].startswith("Verif")} == {
        ("VerifiedRecords", None): 30,
        ("VerificationDifferences", None): 0,
        ("VerifiedThroughOffset", topic): 15,
        ("VerifiedRecords", topic): 30,
        ("VerificationDifferences", topic): 0,
    }
    runs = sorted(_raw_runs(tmp_path), key=lambda r: r.partition)
    assert [(r.topic, r.partition, r.compared, r.differences, r.verified_through) for r in runs] == [
        (topic, 0, 15, 0, 15),
        (topic, 1, 15, 0, 15),
    ]
    # WHEN the next tick comes before verify.interval.seconds THEN nothing is verified
    assert verify.lambda_handler(load_event("schedule.json"), CONTEXT) == {"verified": False}

    # GIVEN a record no source record explains appended to the copy of partition 1, and 5 more replicated there
    produce(handler_flow.b, f"a.{topic}", [(1, Rec(b"intruder", b"intruder", (), int(time.time() * 1000)))])
    produce(handler_flow.a, topic, [(1, r) for _, r in numbered_records(5, 1, topic, start=30)])
    fresh = {1: read_topic(handler_flow.a, topic)[1][15:]}
    assert mirror.lambda_handler(kafka_event(handler_flow.a, topic, fresh), CONTEXT)["records"] == 5
    # WHEN the interval has passed
    _due_again(handler_flow)
    answer = verify.lambda_handler(load_event("schedule.json"), CONTEXT)
    # THEN only the new range is compared, the intruder is the one difference, and partition 1 stays verified
    # through 15, as partition 0 with nothing new
    assert (answer["compared"], answer["differences"], answer["identical"]) == (5, 1, False)
    facts = handler_flow.state.flow_status("a", "b")
    assert verified_positions(facts) == {(topic, 0): (15, 15), (topic, 1): (15, 15)}
    assert facts["verification_differences"] == 1


def test_a_run_out_of_time_leaves_partitions_to_the_next_which_starts_with_them(flow: tuple[HandlerFlow, str]) -> None:
    handler_flow, topic = flow
    # WHEN the function is invoked with no time left THEN one partition is verified (a run always makes progress)
    # and the other is left, named where the next run starts
    answer = verify.lambda_handler(load_event("schedule.json"), NoTimeLeft("srm-a-b-verify"))
    assert (answer["partitions"], answer["deferred"], answer["compared"]) == (1, 1, 15)
    facts = handler_flow.state.flow_status("a", "b")
    assert verified_positions(facts) == {(topic, 0): (15, 15)}
    assert facts["verify_next"] == f"{topic}:1"
    # WHEN the next due run is out of time too THEN it verifies the partition left, not the first one again
    _due_again(handler_flow)
    answer = verify.lambda_handler(load_event("schedule.json"), NoTimeLeft("srm-a-b-verify"))
    assert (answer["partitions"], answer["deferred"], answer["compared"]) == (1, 1, 15)
    facts = handler_flow.state.flow_status("a", "b")
    assert verified_positions(facts) == {(topic, 0): (15, 15), (topic, 1): (15, 15)}
