"""Heartbeats: MM2-format records that prove a flow end to end and measure its latency.

The heartbeat function writes ``Heartbeat(source alias, target alias, now)`` (:class:`srm.mm2.formats.Heartbeat`,
byte for byte MM2's) to the ``heartbeats`` topic of the flow's *source* cluster. Heartbeats topics are always
replicated, so the flow's own mirror carries it to ``<source>.heartbeats`` on the target — through the same event
source mapping, batching and producer as data. When the mirror has written a batch of the source's ``heartbeats``
topic to the target, it knows the replication latency of the newest heartbeat in it (now − its timestamp) and
records it with the flow's status (:func:`latest_heartbeat`, ``StateStore.flow_status``).

This module does no I/O of its own: the producer is handed in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from srm.errors import RetriableError
from srm.kafka.clients import produce_and_wait
from srm.mm2.formats import FormatError, Heartbeat

__all__ = ["HeartbeatContext", "HeartbeatError", "emit_heartbeat", "latest_heartbeat"]


class HeartbeatError(RetriableError, RuntimeError):
    """The source cluster did not acknowledge the heartbeat (retried at the next interval)."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


@dataclass
class HeartbeatContext:
    """The heartbeat function's dependencies for one flow (built by :mod:`srm.app`)."""

    source: str
    target: str
    topic: str  # the policy's heartbeats topic on the source: ``heartbeats``
    producer: Any  # a confluent_kafka Producer to the source cluster
    timeout_s: float = 30.0


def emit_heartbeat(ctx: HeartbeatContext, now_ms: int | None = None) -> Heartbeat:
    """Write one heartbeat to the source's heartbeats topic and wait for the acknowledgement."""
    heartbeat = Heartbeat(ctx.source, ctx.target, int(time.time() * 1000) if now_ms is None else now_ms)
    acks = produce_and_wait(
        ctx.producer, ctx.topic, [(heartbeat.key(), heartbeat.value(), heartbeat.timestamp)], ctx.timeout_s
    )
    if acks.error is not None or not acks.settled:
        reason = acks.error.str() if acks.error is not None else f"not acknowledged within {ctx.timeout_s:.0f}s"
        raise HeartbeatError(f"heartbeat {ctx.source}->{ctx.target} to {ctx.topic}: {reason}", topic=ctx.topic)
    return heartbeat


def latest_heartbeat(keys: Sequence[bytes | None], values: Sequence[bytes | None], source: str) -> Heartbeat | None:
    """The newest heartbeat emitted on ``source`` among a batch's records (records that are not heartbeats, or
    were emitted elsewhere, are ignored)."""
    newest: Heartbeat | None = None
    for key, value in zip(keys, values, strict=True):
        try:
            heartbeat = Heartbeat.decode(key, value)
        except FormatError:
            continue
        if heartbeat.source_alias == source and (newest is None or heartbeat.timestamp > newest.timestamp):
            newest = heartbeat
    return newest
