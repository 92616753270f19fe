"""CloudWatch metrics as the functions print them, checked against the Embedded Metric Format specification, and
every metric name used elsewhere (templates, the metrics table the API serves) checked against the one list."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import cfn_yaml

from srm.control.verify import FlowVerification, verify_values
from srm.core.plans import TopicPlan
from srm.core.verification import PartitionReport
from srm.flow import Flow
from srm.handlers.checkpoint import checkpoint_values
from srm.handlers.mirror import mirror_values
from srm.handlers.topic_sync import topic_sync_values
from srm.kafka.acls import AclSyncResult
from srm.metrics.emf import publish
from srm.metrics.model.names import DIMENSIONS, EMF_METRICS, NAMESPACE, TABLE_ATTRIBUTES
from srm.metrics.model.sketch import Sketch
from srm.replication.checkpoint import CheckpointResult, FlowSample
from srm.replication.context import BatchResult, TopicStats
from srm.replication.topic_sync import TopicSyncResult

ROOT = Path(__file__).resolve().parents[2]
# CloudWatch's units (the EMF specification's list)
UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes", "Bits",
    "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second", "Kilobytes/Second",
    "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
    "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
}  # fmt: skip


def check_emf(document: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Raise on anything the EMF specification forbids; return (metric, dimension set) pairs."""
    aws = document["_aws"]
    assert isinstance(aws["Timestamp"], int) and aws["Timestamp"] > 0
    found = []
    for directive in aws["CloudWatchMetrics"]:
        assert isinstance(directive["Namespace"], str) and 1 <= len(directive["Namespace"]) <= 255
        assert directive["Namespace"] == NAMESPACE
        assert len(directive["Metrics"]) <= 100
        for dimension_set in directive["Dimensions"]:
            assert 1 <= len(dimension_set) <= 30
            for name in dimension_set:
                assert isinstance(document[name], str) and document[name]  # a dimension's value is a string
            assert set(dimension_set) <= set(DIMENSIONS) and "Flow" in dimension_set
        for metric in directive["Metrics"]:
            assert 1 <= len(metric["Name"]) <= 255
            assert metric.get("Unit", "None") in UNITS
            value = document[metric["Name"]]
            values = value if isinstance(value, list) else [value]
            assert 1 <= len(values) <= 100 and all(isinstance(v, int | float) for v in values)
            assert EMF_METRICS[metric["Name"]] == metric["Unit"]
            found += [(metric["Name"], tuple(s)) for s in directive["Dimensions"]]
    return found


def printed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


@pytest.fixture(autouse=True)
def emf_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "srm-mirror")  # as the template sets it: no dimension from it


def every_kind_of_value() -> list[list[tuple[str, float, str | None]]]:
    """What each function publishes, one list per invocation (each metric at least once)."""
    batch = BatchResult(
        records=3,
        bytes=300,
        topics={"orders": TopicStats(2, 200, 40, 50), "pay": TopicStats(1, 100)},
        lost={"orders": 7},
        resets={"pay": 1},
        filtered={"orders": 4},
    )
    checkpoints = CheckpointResult(checkpointed=2, skipped={"unchanged": 1}, latency=Sketch.of([12.0, 30.0]))
    sample = FlowSample(
        lag={"orders": 5, "pay": 0},
        oldest_age_ms={"orders": 400_000, "pay": 0},
        stalled={"orders": 1_700_000_000_000},
        heartbeat_age_ms=900,
        heartbeat_latency_ms=20,
    )
    sync = TopicSyncResult(TopicPlan(), created=["a.orders"], configs_changed=["a.orders"], acls=AclSyncResult())
    return [
        mirror_values(batch),
        [("ReplicatorFailure", 1, None)],
        checkpoint_values(checkpoints, sample),
        [*topic_sync_values(sync), ("TopicSyncFailures", 0, None)],
        verify_values(
            FlowVerification(Flow("a", "b"), [PartitionReport("orders", 0, "a.orders", "offset runs", (0, 9), (0, 9))])
        ),
    ]


def emitted_pairs(capsys: pytest.CaptureFixture[str]) -> set[tuple[str, tuple[str, ...]]]:
    """(metric, sorted dimension names) of everything the functions print, each document checked."""
    emitted: set[tuple[str, tuple[str, ...]]] = set()
    for values in every_kind_of_value():
        publish("a->b", values)
        documents = printed(capsys)
        assert documents, "nothing printed"
        for document in documents:
            emitted |= {(name, tuple(sorted(dimensions))) for name, dimensions in check_emf(document)}
            assert document["Flow"] == "a->b"
    return emitted


def test_every_function_prints_valid_emf_with_flow_and_topic_dimensions_only(capsys: pytest.CaptureFixture[str]):
    emitted = emitted_pairs(capsys)
    assert {name for name, _ in emitted} == set(EMF_METRICS)  # the list holds what is emitted, no more


def test_an_unlisted_metric_name_is_refused():
    with pytest.raises(KeyError, match="EMF_METRICS"):
        publish("a->b", [("Throughput", 1, None)])


def test_many_topics_stay_within_100_metrics_per_document(capsys: pytest.CaptureFixture[str]):
    publish("a->b", [("ReplicatedRecords", i, None) for i in range(250)])
    for document in printed(capsys):
        check_emf(document)


def template_metrics() -> list[tuple[str, str, tuple[str, ...]]]:
    """(namespace, metric, sorted dimension names) of every metric the templates' alarms and dashboards use."""
    found = []
    for path in sorted(ROOT.glob("template*.yaml")):
        template = json.loads(json.dumps(cfn_yaml.load(str(path))))
        for logical_id, resource in template["Resources"].items():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::CloudWatch::Alarm":
                assert "Metrics" not in props, f"{logical_id}: metric math alarms are not checked here; extend the test"
                dimensions = tuple(sorted(d["Name"] for d in props.get("Dimensions", [])))
                found.append((props["Namespace"], props["MetricName"], dimensions))
            elif resource["Type"] == "AWS::CloudWatch::Dashboard":
                body = props["DashboardBody"]
                body = body["Fn::Sub"] if isinstance(body, dict) else body
                for widget in json.loads(body[0] if isinstance(body, list) else body)["widgets"]:
                    for row in widget["properties"].get("metrics", []):
                        if search := _search(row):
                            found.append(search)
                            continue
                        parts = [p for p in row if isinstance(p, str)]
                        # no math expressions and no "..." shorthand: every row names its metric in full
                        assert len(parts) >= 2 and parts[0] != "..." and len(parts) % 2 == 0, f"{logical_id}: {row}"
                        found.append((parts[0], parts[1], tuple(sorted(parts[2::2]))))
    return found


def _search(row: list[Any]) -> tuple[str, str, tuple[str, ...]] | None:
    """A row that is a CloudWatch search ``SEARCH('{Namespace,Dim,…} MetricName="X" …', …)``: what it finds."""
    if len(row) != 1 or not isinstance(row[0], dict) or "expression" not in row[0]:
        return None
    match = re.fullmatch(r"SEARCH\('\{([^}]*)\} MetricName=\"(\w+)\".*", row[0]["expression"])
    assert match, f"only searches by schema and metric name are checked here: {row}"
    namespace, *dimensions = match.group(1).split(",")
    return namespace, match.group(2), tuple(sorted(dimensions))


def test_metrics_in_templates_are_emitted_with_those_dimensions(capsys: pytest.CaptureFixture[str]):
    # GIVEN every metric the dashboards and alarms use WHEN compared with what the functions print
    used = template_metrics()
    ours = {(name, dimensions) for namespace, name, dimensions in used if namespace == NAMESPACE}
    assert {"MessageLag", "HeartbeatAge", "ReplicatorFailure", "ReplicatedRecords"} <= {name for name, _ in ours}
    # THEN each of srm's is emitted with that dimension set, and the others are the Lambda function metrics
    assert ours <= emitted_pairs(capsys)
    others = {(namespace, name, dimensions) for namespace, name, dimensions in used if namespace != NAMESPACE}
    assert others == {("AWS/Lambda", "Errors", ("FunctionName",)), ("AWS/Lambda", "Throttles", ("FunctionName",))}


def test_table_attributes_are_kebab_case_and_unique():
    assert len(set(TABLE_ATTRIBUTES)) == len(TABLE_ATTRIBUTES)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", name) for name in TABLE_ATTRIBUTES)


def test_the_checkpoint_function_publishes_each_topics_oldest_unreplicated_age_and_the_stalled_ones():
    # GIVEN a sample where orders lags 400 s behind (stalled) and pay is caught up
    sample = FlowSample(
        lag={"orders": 5, "pay": 0}, oldest_age_ms={"orders": 400_000, "pay": 0}, stalled={"orders": 1_700_000_000_000}
    )
    # WHEN its values are made THEN the flow's figure is its worst topic's, and each topic has its own
    values = [
        v for v in checkpoint_values(CheckpointResult(), sample) if v[0] in ("OldestUnreplicatedAge", "StalledTopics")
    ]
    assert sorted(values, key=str) == sorted(
        [
            ("OldestUnreplicatedAge", 400_000, None),
            ("OldestUnreplicatedAge", 400_000, "orders"),
            ("OldestUnreplicatedAge", 0, "pay"),
            ("StalledTopics", 1, None),
            ("StalledTopics", 1, "orders"),
            ("StalledTopics", 0, "pay"),
        ],
        key=str,
    )
