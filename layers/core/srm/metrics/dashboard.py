"""The CloudWatch dashboard of one flow, defined once here: ``template.yaml`` embeds :func:`body` as the
``DashboardBody`` of ``FlowDashboard`` (``!Sub``), and ``tests/unit/test_template_monitoring.py`` checks the two are
equal.
After a change, regenerate the template's copy with ``python -m srm.metrics.dashboard``.

The body holds CloudFormation placeholders (``${AWS::Region}``, the flow's aliases, the functions' names and the
alarms' ARNs), which ``!Sub`` fills in per stack. srm's metrics are named from :mod:`srm.metrics.model.names` and use
the dimensions the functions emit them with (``Flow``; per topic ``Flow`` + ``Topic`` are not on the dashboard, their
topics being unknown when the stack is deployed).
"""

from __future__ import annotations

import json
from typing import Any

from srm.metrics.model.names import EMF_METRICS, NAMESPACE

__all__ = ["ALARMS", "FLOW", "FUNCTIONS", "body"]

FLOW = "${SourceAlias}->${TargetAlias}"  # the Flow dimension's value, as srm.metrics.emf publishes it
REGION = "${AWS::Region}"
PERIOD = 60  # seconds; the checkpoint function samples lag and heartbeats every minute by default
# the flow stack's functions (logical ids; ${Id} is the function's name) and alarms (${Id.Arn})
FUNCTIONS = (
    "MirrorFunction",
    "TopicSyncFunction",
    "CheckpointFunction",
    "HeartbeatFunction",
    "VerifyFunction",
    "MetricsApiFunction",
)
ALARMS = (
    "LagAlarm",
    "HeartbeatAgeAlarm",
    "FailedBatchesAlarm",
    "CheckpointErrorsAlarm",
    "DataLossAlarm",
    "MappingProblemsAlarm",
    "TopicStalledAlarm",
    "VerificationDifferencesAlarm",
)
WIDTH, HEIGHT = 12, 6  # two graphs a row (the grid is 24 wide)


def _srm(name: str, stat: str, label: str) -> list[Any]:
    if name not in EMF_METRICS:
        raise KeyError(f"{name} is not listed in srm.metrics.model.names.EMF_METRICS")
    return [NAMESPACE, name, "Flow", FLOW, {"stat": stat, "label": label}]


def _per_topic(name: str, stat: str) -> list[Any]:
    """One line per topic of the flow (a CloudWatch search: topics come and go without a template change)."""
    if name not in EMF_METRICS:
        raise KeyError(f"{name} is not listed in srm.metrics.model.names.EMF_METRICS")
    query = f'{{{NAMESPACE},Flow,Topic}} MetricName="{name}" Flow="{FLOW}"'
    return [{"expression": f"SEARCH('{query}', '{stat}', {PERIOD})", "id": "topics", "label": ""}]


def _lambda(name: str, function: str) -> list[Any]:
    return ["AWS/Lambda", name, "FunctionName", f"${{{function}}}", {"stat": "Sum", "label": function}]


def _graph(title: str, metrics: list[list[Any]], unit: str = "") -> dict[str, Any]:
    properties: dict[str, Any] = {
        "title": title,
        "view": "timeSeries",
        "region": REGION,
        "period": PERIOD,
        "metrics": metrics,
    }
    if unit:
        properties["yAxis"] = {"left": {"label": unit, "min": 0}}
    return {"type": "metric", "properties": properties}


def widgets() -> list[dict[str, Any]]:
    """The dashboard's widgets in order, without positions."""
    alarms = {
        "type": "alarm",
        "properties": {"title": "Alarms", "alarms": [f"${{{a}.Arn}}" for a in ALARMS]},
    }
    return [
        alarms,
        _graph("Records replicated (per minute)", [_srm("ReplicatedRecords", "Sum", "records")], "records"),
        _graph("Bytes replicated (per minute)", [_srm("ReplicatorThroughput", "Sum", "bytes")], "bytes"),
        _graph(
            "Replication latency (each batch's largest)",
            [
                _srm("ReplicationLatency", "p99", "latency p99"),
                _srm("ReplicationLatency", "Maximum", "latency max"),
            ],
            "ms",
        ),
        _graph("Lag (records, summed over partitions)", [_srm("MessageLag", "Maximum", "lag")], "records"),
        _graph(
            "Oldest record not yet replicated, per topic (a stalled topic's grows)",
            [_per_topic("OldestUnreplicatedAge", "Maximum")],
            "ms",
        ),
        _graph(
            "Heartbeat age (end to end)",
            [
                _srm("HeartbeatAge", "Maximum", "heartbeat age"),
                _srm("HeartbeatLatency", "Maximum", "heartbeat latency"),
            ],
            "ms",
        ),
        _graph("Checkpoint latency", [_srm("CheckpointLatency", "Maximum", "checkpoint latency max")], "ms"),
        _graph(
            "Consumer groups checkpointed / skipped",
            [_srm("GroupsCheckpointed", "Sum", "checkpointed"), _srm("GroupsSkipped", "Sum", "skipped")],
            "groups",
        ),
        _graph("Failed batches (retried)", [_srm("ReplicatorFailure", "Sum", "failed batches")], "batches"),
        _graph(
            "Cannot be replayed: source offsets lost / partitions reset",
            [_srm("LostOffsets", "Sum", "lost offsets"), _srm("TopicResets", "Sum", "topic resets")],
            "count",
        ),
        _graph("Lambda errors", [_lambda("Errors", f) for f in FUNCTIONS], "invocations"),
        _graph("Lambda throttles", [_lambda("Throttles", f) for f in FUNCTIONS], "invocations"),
        _graph("Event source mappings with a problem", [_srm("MappingProblems", "Maximum", "mappings")], "mappings"),
        _graph(
            "Continuous verification: records compared / differences found",
            [_srm("VerifiedRecords", "Sum", "compared"), _srm("VerificationDifferences", "Sum", "differences")],
            "records",
        ),
        _graph(
            "Verified through (next source offset not verified), per topic",
            [_per_topic("VerifiedThroughOffset", "Minimum")],
            "offset",
        ),
    ]


def body() -> str:
    """The dashboard body: JSON, one widget a line (readable in the template), ending with a newline."""
    placed = []
    for i, widget in enumerate(widgets()):
        placed.append({**widget, "x": (i % 2) * WIDTH, "y": (i // 2) * HEIGHT, "width": WIDTH, "height": HEIGHT})
    lines = ",\n".join(f"  {json.dumps(w)}" for w in placed)
    return f'{{"widgets": [\n{lines}\n]}}\n'


if __name__ == "__main__":
    print(body(), end="")
