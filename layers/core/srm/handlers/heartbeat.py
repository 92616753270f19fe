"""The heartbeat function (schedule): one MM2-format heartbeat to the ``heartbeats`` topic of the flow's source.

The flow's own mirror replicates it to ``<source>.heartbeats`` on the target and records its latency. Locally it
runs every ``emit.heartbeats.interval.seconds``; on AWS every minute (EventBridge's finest schedule).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from srm.app.heartbeat import HeartbeatWiring
from srm.replication.heartbeat import HeartbeatError, emit_heartbeat

logger = Logger(service="srm-heartbeat")


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = HeartbeatWiring.current()
    emitter = app.heartbeat_context()
    if emitter is None:
        return {"emitted": False}
    try:
        heartbeat = emit_heartbeat(emitter)
    except HeartbeatError as e:
        app.kafka.discard_producer(emitter.source, "heartbeats")  # the next run starts a fresh producer
        logger.error("heartbeat not emitted, next interval retries: %s", e)
        raise
    return {
        "emitted": True,
        "topic": emitter.topic,
        "source": heartbeat.source_alias,
        "target": heartbeat.target_alias,
        "timestamp": heartbeat.timestamp,
    }
