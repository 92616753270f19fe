"""Whether a consumer has read its assigned partitions to their ends: what the event source counts as progress while
no record comes (:meth:`srm.local.event_source.EmulatedMapping.stall`)."""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["WATERMARK_TIMEOUT_S", "caught_up"]

log = logging.getLogger(__name__)

WATERMARK_TIMEOUT_S = 5.0  # a request to the source: committed offsets, log ends, metadata


def caught_up(consumer: Consumer, assignment: list[TopicPartition], positions: dict[int, int], *, fresh: bool) -> bool:
    """Whether every assigned partition is read to its end: as the last fetch responses tell, or (``fresh``) as
    the broker answers now. Unknown counts as not caught up.

    ``positions`` (per assignment) is where the reading of each partition goes on: one past the last record handed
    over, or, for a partition nothing was handed over from since it was assigned, its committed offset (asked once;
    without one it is read from its log start). Not the consumer's ``position()``: librdkafka keeps that at the old
    incarnation's offset after a recreated topic's fetch was reset to the log start, until the new one outgrows it."""
    try:
        unknown = [TopicPartition(tp.topic, tp.partition) for tp in assignment if tp.partition not in positions]
        if unknown:
            for tp in consumer.committed(unknown, timeout=WATERMARK_TIMEOUT_S):
                positions[tp.partition] = tp.offset
        for tp in assignment:
            if fresh:
                low, high = consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S)
            else:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
            position = positions.get(tp.partition, -1)
            if position < 0:
                position = low  # no committed offset: read from the log start (auto.offset.reset=earliest)
            if high >= 0 and position > high:
                # Reading would resume beyond the log end: the log was truncated, or the topic recreated (the
                # consumer's position, or a committed offset a broker kept, is the old incarnation's). The fetch
                # resets to the log start (auto.offset.reset), as Lambda's poller starts a recreated topic afresh.
                log.warning(
                    "event source: %s-%d resumes at %d, beyond its log end %d: the topic was recreated or truncated; "
                    "reading it again from its log start",
                    tp.topic,
                    tp.partition,
                    position,
                    high,
                )
                positions[tp.partition] = position = low
            if high < 0 or position < 0 or position < high:
                return False
    except KafkaException:
        return False
    return True
