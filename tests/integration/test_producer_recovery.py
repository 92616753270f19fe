"""A producer a fatal error left unusable is replaced. librdkafka raises an idempotent producer's fatal error
(OUT_OF_ORDER_SEQUENCE_NUMBER after a broker lost acknowledged data, say) once, from whichever poll serves it, and
fails every later produce call; Apache Kafka keeps producer state across restarts, so the error is injected into the
poll that would serve it, and everything else runs against the real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

import srm.kafka.clients as kafka_clients
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.kafka.clients import KafkaClients
from tests.support.kafka import create_topic, read_topic, unique

pytestmark = pytest.mark.integration


class _FailsOnce(kafka_clients._Producer):
    """The first poll after ``fail_next`` is set serves a fatal error, as librdkafka does."""

    fail_next = False

    def poll(self, timeout: float = -1) -> int:
        if self.fail_next:
            self.fail_next = False
            error = KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "injected", fatal=True))
            self._note(error)
            raise error
        return super().poll(timeout)


def test_producer_failed_for_good_is_replaced(clusters, monkeypatch):
    b = clusters["b"]
    topic = unique("fatal")
    create_topic(b.bootstrap, topic, 2)
    config = SrmConfig.from_properties(
        Properties.of({"clusters": "a, b", "a.bootstrap.servers": "unused:9092", "b.bootstrap.servers": b.bootstrap})
    )
    monkeypatch.setattr(kafka_clients, "_Producer", _FailsOnce)
    clients = KafkaClients()

    def producer():
        return clients.producer(config, "b", None, delivery_timeout_ms=8000, tag="test")

    # GIVEN a producer in use whose next poll serves a fatal error
    failed = producer()
    failed.produce(topic, b"before", partition=0)
    assert failed.flush(30) == 0
    assert producer() is failed, "a healthy producer is reused"
    failed.fail_next = True

    # WHEN the next invocation asks for the producer (the check polls, and the error is served)
    replacement = producer()

    # THEN it is a new one, and its records are acknowledged
    assert failed.fatal_error is not None and failed.fatal_error.fatal()
    assert replacement is not failed
    errors = []
    for i in range(10):
        replacement.produce(topic, f"after-{i}".encode(), partition=i % 2, on_delivery=lambda e, _m: errors.append(e))
    assert replacement.flush(30) == 0
    assert errors == [None] * 10
    values = [r.value for records in read_topic(b.bootstrap, topic).values() for r in records]
    assert sorted(values) == sorted([b"before", *(f"after-{i}".encode() for i in range(10))])
    # … and it stays the cached one
    assert producer() is replacement
