"""The mirror function: an MSK event source mapping delivers a batch of one topic; replicate it or fail.

Failing (raising) is how a batch gets retried: the event source commits nothing and redelivers the same batch.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from srm.app import App
from srm.core.events import MalformedEventError, parse_event
from srm.replication.mirror import DeliveryError, replicate_batch

# Before each call the Lambda runtime turns the event (up to 6 MB of JSON, some 10^5 objects) into Python objects,
# inside the billed duration; with the default thresholds the garbage collector walks every object of the container
# several times per event, which doubles that decoding. The imports are done: leave their objects out of the walks
# and collect the young generation every 50,000 allocations instead of 700 (measured in `make bench`).
gc.freeze()
gc.set_threshold(50_000, 20, 10)

logger = Logger(service="srm-mirror")
metrics = Metrics(namespace="ServerlessSRM", service="mirror")


# One invocation at a time per container on Lambda; the local runtime may run several at once in one process.
_metrics_lock = threading.Lock()


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    app = App.current()
    ctx = app.mirror_context()
    try:
        _, batches = parse_event(event)
        result = replicate_batch(batches, ctx)
    except MalformedEventError as e:
        logger.error("malformed event: %s", e)
        raise
    except DeliveryError as e:  # a producer failed for good is replaced by the next invocation's (srm.kafka.clients)
        logger.error("batch not replicated, it will be retried: %s", e)
        raise
    with _metrics_lock:
        metrics.add_dimension(name="Flow", value=f"{ctx.source}->{ctx.target}")
        metrics.add_metric(name="ReplicatedRecords", unit=MetricUnit.Count, value=result.records)
        metrics.add_metric(name="ReplicatedBytes", unit=MetricUnit.Bytes, value=result.bytes)
        metrics.add_metric(name="ReplicationLatencyMax", unit=MetricUnit.Milliseconds, value=result.max_latency_ms)
        metrics.flush_metrics()
        metrics.clear_metrics()  # a disabled Metrics keeps its set, then prints it at 100 values
    return result.summary()
