"""The checkpoint function (EventBridge schedule): translate group offsets, emit checkpoints, sync idle groups; and
sample the flow's lag and heartbeat for monitoring."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app.checkpoint import CheckpointWiring
from srm.metrics.emf import Value, publish
from srm.replication.checkpoint import CheckpointResult, FlowSample, emit_checkpoints, sample_flow

logger = Logger(service="srm-checkpoint")

FLUSH_S = 1.0  # the raw metric records' flush before returning (see srm.handlers.mirror)


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = CheckpointWiring.current()
    ctx = app.checkpoint_context()
    try:
        result = emit_checkpoints(ctx)
        try:
            sample: FlowSample | None = sample_flow(ctx)
        except Exception as e:  # monitoring never fails the checkpoints
            logger.warning("lag not sampled: %s", e)
            sample = None
    finally:
        app.end_of_call(FLUSH_S)
    publish(f"{ctx.source}->{ctx.target}", checkpoint_values(result, sample))
    logger.info("checkpoints emitted", extra=result.summary())
    return result.summary()


def checkpoint_values(result: CheckpointResult, sample: FlowSample | None) -> list[Value]:
    values: list[Value] = [
        ("GroupsCheckpointed", result.checkpointed, None),
        ("GroupsSkipped", sum(result.skipped.values()), None),
    ]
    if result.latency.n:
        values.append(("CheckpointLatency", result.latency.max, None))
    if sample is not None:
        values.append(("MessageLag", sum(sample.lag.values()), None))
        values += [("MessageLag", lag, topic) for topic, lag in sample.lag.items()]
        if sample.oldest_age_ms:
            values.append(("OldestUnreplicatedAge", max(sample.oldest_age_ms.values()), None))
            values += [("OldestUnreplicatedAge", age, topic) for topic, age in sample.oldest_age_ms.items()]
        values.append(("StalledTopics", len(sample.stalled), None))
        values += [("StalledTopics", 1 if topic in sample.stalled else 0, topic) for topic in sample.lag]
        if sample.heartbeat_age_ms is not None:
            values.append(("HeartbeatAge", sample.heartbeat_age_ms, None))
        if sample.heartbeat_latency_ms is not None:
            values.append(("HeartbeatLatency", sample.heartbeat_latency_ms, None))
    return values
