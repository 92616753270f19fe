"""The mirror function: an MSK event source mapping delivers a batch of one topic; replicate it or fail.

Failing (raising) is how a batch gets retried: the event source commits nothing and redelivers the same batch.
"""

from __future__ import annotations

import gc
from typing import Any

from aws_lambda_powertools import Logger

from srm.app.mirror import MirrorWiring
from srm.core.events import DecodedEvent, MalformedEventError, parse_event
from srm.metrics.emf import publish
from srm.replication.context import BatchResult, DataLossError, DeliveryError, MirrorError
from srm.replication.mirror import replicate_batch

# Before each call the Lambda runtime turns the event (up to 6 MB of JSON, some 10^5 objects) into Python objects,
# inside the billed duration; with the default thresholds the garbage collector walks every object of the container
# several times per event, which doubles that decoding. The imports are done: leave their objects out of the walks
# and collect the young generation every 50,000 allocations instead of 700 (measured in `make bench`).
gc.freeze()
gc.set_threshold(50_000, 20, 10)

logger = Logger(service="srm-mirror")

# How long a handler waits for its raw metric records to be handed over before it returns (Lambda freezes the
# sender thread between invocations); a slow sink delays a batch by at most this, never fails it.
FLUSH_S = 0.5


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any] | DecodedEvent, context: Any) -> dict[str, Any]:
    """Lambda invokes with the MSK JSON event; the local event source may hand over the same batch decoded."""
    app = MirrorWiring.current()
    ctx = app.mirror_context()
    flow = f"{ctx.source}->{ctx.target}"
    try:
        _, batches = parse_event(event)
        result = replicate_batch(batches, ctx)
    except MalformedEventError as e:
        logger.error("malformed event: %s", e)
        raise
    except DeliveryError as e:  # a producer failed for good is replaced by the next invocation's (srm.kafka.clients)
        logger.error("batch not replicated, it will be retried: %s", e)
        publish(flow, [("ReplicatorFailure", 1, None)])
        raise
    except DataLossError as e:  # fail.on.data.loss: the partition stops here, loudly
        logger.error("batch not replicated, the partition stops: %s", e)
        publish(flow, [("ReplicatorFailure", 1, None), *loss_values(e.lost, {})])
        raise
    except MirrorError:
        publish(flow, [("ReplicatorFailure", 1, None)])
        raise
    finally:
        app.end_of_call(FLUSH_S)
    publish(flow, mirror_values(result))
    return result.summary()


def mirror_values(result: BatchResult) -> list[tuple[str, float, str | None]]:
    values: list[tuple[str, float, str | None]] = [
        ("ReplicatedRecords", result.records, None),
        ("ReplicatorThroughput", result.bytes, None),
        ("DeadLetteredRecords", result.dead_lettered, None),
    ]
    if result.filtered:  # only flows with transforms drop records
        values.append(("FilteredRecords", sum(result.filtered.values()), None))
        values += [("FilteredRecords", n, topic) for topic, n in result.filtered.items()]
    for topic, stats in result.topics.items():
        values += [
            ("ReplicatedRecords", stats.records, topic),
            ("ReplicatorThroughput", stats.bytes, topic),
            ("ReplicationLatency", stats.max_latency_ms, topic),
            ("RecordAge", stats.max_age_ms, topic),
        ]
    if result.topics:
        values.append(("ReplicationLatency", max(s.max_latency_ms for s in result.topics.values()), None))
    return values + loss_values(result.lost, result.resets)


def loss_values(lost: dict[str, int], resets: dict[str, int]) -> list[tuple[str, float, str | None]]:
    """Lost offsets and topic resets found before a batch, per topic and for the flow (none when none)."""
    values: list[tuple[str, float, str | None]] = []
    for name, counts in (("LostOffsets", lost), ("TopicResets", resets)):
        if counts:
            values += [(name, n, topic) for topic, n in counts.items()]
            values.append((name, sum(counts.values()), None))
    return values
