"""The mirror handler alone: pre-built MSK events (as the event source mapping sends them: up to 10,000 records and
6 MB each) replicated by ``srm.handlers.mirror.lambda_handler`` in this process, against the real target cluster.

The state table is moto's in-process DynamoDB (``mock_aws``): one write per batch per partition, as on AWS, but at
moto's latency, not DynamoDB's. ``json.loads`` of each payload — what the Lambda runtime does before calling the
handler, inside the billed duration — is timed apart and reported next to the handler's own time.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.measure import Meter, PathResult
from bench.workload import Workload

__all__ = ["build_events", "run_handler"]

BATCH_SIZE = 10_000  # the MSK event source mapping's maximum
MAX_PAYLOAD = 6 * 1024 * 1024  # Lambda's invoke payload limit


def build_events(source: str, workload: Workload, consumer_conf: dict[str, str], source_arn: str) -> list[bytes]:
    """The events the event source would send for the whole topic, as payload bytes."""
    from srm.core.events import EventBuilder

    consumer = Consumer({**consumer_conf, "group.id": "srm-bench-events"})
    consumer.assign([TopicPartition(workload.topic, p, OFFSET_BEGINNING) for p in range(workload.partitions)])
    events: list[bytes] = []
    builder = EventBuilder(source_arn, source, MAX_PAYLOAD)
    seen = 0
    try:
        while seen < workload.records:
            for m in consumer.consume(10_000, 1.0):
                if m.error() is not None:
                    continue
                seen += 1
                key, value, headers = m.key(), m.value(), m.headers()
                estimate = EventBuilder.estimate(key, value, headers, topic=workload.topic)
                if builder.count >= BATCH_SIZE or not builder.fits(estimate):
                    events.append(builder.to_bytes())
                    builder = EventBuilder(source_arn, source, MAX_PAYLOAD)
                builder.add(
                    workload.topic,
                    m.partition(),
                    m.offset(),
                    m.timestamp()[1],
                    "CREATE_TIME",
                    key,
                    value,
                    headers,
                    estimate,
                )
    finally:
        consumer.close()
    if builder.count:
        events.append(builder.to_bytes())
    return events


def _warm_up(events: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The shortest run of first events holding every partition of the workload, and the rest."""
    partitions = [set(json.loads(e)["records"]) for e in events]
    every = set().union(*partitions)
    seen: set[str] = set()
    for i, found in enumerate(partitions):
        seen |= found
        if seen == every:
            return events[: i + 1], events[i + 1 :]
    return events[:1], events[1:]


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_handler(
    config_properties: dict[str, str], source: str, target: str, batches: dict[str, list[bytes]]
) -> dict[str, PathResult]:
    """Invoke the mirror handler on every event of every workload (by name); the first events of each workload, up to
    one of every partition, warm up (create the remote topic, connect the producers — exactly-once has one per
    partition) and are not timed."""
    import boto3
    from moto import mock_aws

    from srm.app import App
    from srm.aws.config_table import DynamoDBConfig, create_config_table
    from srm.aws.state import create_state_table
    from srm.config.parsing import Properties
    from srm.config.settings import SrmConfig
    from srm.local.context import LocalContext

    results: dict[str, PathResult] = {}
    env = {
        "SRM_SOURCE": source,
        "SRM_TARGET": target,
        "SRM_CONFIG_TABLE": "srm-config",
        "SRM_STATE_TABLE": "srm-state",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    with _environment(env), mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(db, "srm-config")
        create_state_table(db, "srm-state")
        DynamoDBConfig(db, "srm-config").replace_all(SrmConfig.from_properties(Properties.of(config_properties)))
        App.reset()
        from srm.handlers.mirror import lambda_handler

        context = LocalContext(f"srm-{source}-{target}-mirror")
        try:
            for name, all_events in batches.items():
                warm_up, events = _warm_up(all_events)
                for payload in warm_up:
                    lambda_handler(json.loads(payload), context)
                # A Lambda container holds only the function's own objects: keep the harness's (moto's) out of
                # the garbage collector's way, as the handler module does with its imports.
                gc.collect()
                gc.freeze()
                handler, decode = Meter(), Meter()
                records = 0
                for payload in events:
                    decode.start()
                    event: Any = json.loads(payload)
                    decode.stop()
                    handler.start()
                    summary = lambda_handler(event, context)
                    handler.stop()
                    records += summary["records"]
                    del event
                results[name] = PathResult(
                    records=records,
                    wall_s=handler.wall_s,
                    cpu_s=handler.cpu_s,
                    extra={
                        "events": len(events),
                        "json_decode_wall_s": round(decode.wall_s, 3),
                        "json_decode_cpu_s": round(decode.cpu_s, 3),
                        "avg_event_bytes": round(sum(map(len, events)) / len(events)),
                        "records_per_event": round(records / max(1, len(events))),
                    },
                )
        finally:
            App.reset()
            gc.unfreeze()
    return results
