"""The limit: a plain confluent-kafka consume→produce copy loop, same partitions, keys, values, headers and
timestamps, with the mirror's own producer settings (idempotent, ``acks=all``) — the least any replicator pays.

Delivery is checked the cheapest correct way (``delivery.report.only.error``: a report only for a failed record);
the mirror must also learn every record's downstream offset, which this loop does not.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.measure import Meter, PathResult
from bench.workload import Workload

__all__ = ["run_limit"]


def run_limit(
    source: str,
    workload: Workload,
    remote_topic: str,
    producer_conf: dict[str, str],
    consumer_conf: dict[str, str],
) -> PathResult:
    errors: list[Any] = []
    producer = Producer(
        {**producer_conf, "delivery.report.only.error": True, "on_delivery": lambda err, _msg: errors.append(err)}
    )
    consumer = Consumer({**consumer_conf, "group.id": "srm-bench-limit"})
    consumer.assign([TopicPartition(workload.topic, p, OFFSET_BEGINNING) for p in range(workload.partitions)])
    result = PathResult()
    meter = Meter()
    produce, poll, topic = producer.produce, producer.poll, remote_topic
    try:
        while result.records < workload.records:
            messages = consumer.consume(10_000, 1.0)
            if not messages:
                continue
            if not result.records:
                meter.start()
            for m in messages:
                if m.error() is not None:
                    continue
                key, value = m.key(), m.value()
                while True:
                    try:
                        produce(
                            topic,
                            value,
                            key,
                            partition=m.partition(),
                            timestamp=m.timestamp()[1],
                            headers=m.headers(),
                        )
                        break
                    except BufferError:
                        poll(0.01)
            result.records += len(messages)
            poll(0)
        if producer.flush(120):
            raise RuntimeError("limit: records still unacknowledged after 120 s")
        meter.stop()
    finally:
        consumer.close()
    if errors:
        raise RuntimeError(f"limit: {len(errors)} record(s) not delivered: {errors[0]}")
    result.wall_s, result.cpu_s = meter.wall_s, meter.cpu_s
    result.bytes = result.records * workload.record_bytes
    return result
