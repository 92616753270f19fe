"""``python -m bench.collect``: what ``srm run``'s event source spends per record collecting a batch — the bench's
records (a key, a value, three headers) as a fetch hands them over (confluent-kafka ``Message`` objects, runs of 500
per partition), offered to the decoded event's builder a record at a time (:meth:`DecodedEventBuilder.offer`) and a
partition's run at a time, as the event source does. Best of 20, in µs per record taken, for a batch of 10,000 small
records and one of 2 KB records that the 6 MB payload cuts; both ways must build the same batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Message

from bench.workload import Workload, record_stream
from srm.core.events import DecodedEventBuilder
from srm.local.event_source import offer_fetched

_LIMIT = 6 * 1024 * 1024
_RUN = 500


def fetched(workload: Workload) -> list[Message]:
    now = int(time.time() * 1000)
    return [
        Message(
            topic=workload.topic,
            partition=(i // _RUN) % workload.partitions,
            offset=1_000_000 + i,
            key=key,
            value=value,
            headers=headers,
            timestamp=(1, now + i),
        )
        for i, (_, key, value, headers) in enumerate(record_stream(workload))
    ]


def by_record(messages: list[Message]) -> DecodedEventBuilder:
    builder = DecodedEventBuilder("arn", "127.0.0.1:9092", _LIMIT)
    for m in messages:
        if builder.offer(
            m.topic(), m.partition(), m.offset(), m.timestamp()[1], "CREATE_TIME", m.key(), m.value(), m.headers()
        ):  # type: ignore[arg-type]
            break
    return builder


def by_run(messages: list[Message]) -> DecodedEventBuilder:
    builder = DecodedEventBuilder("arn", "127.0.0.1:9092", _LIMIT)
    offer_fetched(builder, messages, len(messages))
    return builder


def best_us(collect: Callable[[list[Message]], DecodedEventBuilder], messages: list[Message]) -> float:
    """Best of 20, per record taken into the batch."""
    best, taken = float("inf"), 1
    for _ in range(20):
        started = time.perf_counter()
        taken = collect(messages).count
        best = min(best, time.perf_counter() - started)
    return best / taken * 1e6


def main() -> None:
    for workload in (Workload("small", "bench", 10_000, 200), Workload("large", "bench", 10_000, 2048)):
        messages = fetched(workload)
        one, run = by_record(messages), by_run(messages)
        assert (one.payload(), one.size) == (run.payload(), run.size), "the two ways built different batches"
        print(
            f"collect {workload.label()}, {one.count:,} taken: a record at a time {best_us(by_record, messages):.2f} "
            f"µs/record, a run at a time {best_us(by_run, messages):.2f} µs/record",
            flush=True,
        )


if __name__ == "__main__":
    main()
