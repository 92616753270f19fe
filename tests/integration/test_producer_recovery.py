"""A producer an idempotence failure left unusable is replaced, against a real broker restarted under load: the
embedded broker keeps no producer state across a restart, so records in flight then come back as
OUT_OF_ORDER_SEQUENCE_NUMBER — fatal for an idempotent producer, whose every later produce call fails."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from confluent_kafka import KafkaException

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.kafka.clients import KafkaClients
from tests.support.kafka import create_topic, read_topic, unique

pytestmark = pytest.mark.integration


def test_producer_failed_for_good_by_a_broker_restart_is_replaced(restartable):
    b = restartable["b"]
    topic = unique("fatal")
    create_topic(b.bootstrap, topic, 2)
    config = SrmConfig.from_properties(
        Properties.of({"clusters": "a, b", "a.bootstrap.servers": "unused:9092", "b.bootstrap.servers": b.bootstrap})
    )
    clients = KafkaClients()

    def producer():
        return clients.producer(config, "b", None, delivery_timeout_ms=8000, tag="test")

    # GIVEN a producer writing without pause while the broker restarts, until the restart costs it its session
    # (it usually does at the first restart)
    failed = producer()
    for _attempt in range(3):
        stop = threading.Event()

        def load(p=failed, stop=stop) -> None:
            while not stop.is_set():
                try:
                    for i in range(50):
                        p.produce(topic, b"load", partition=i % 2, on_delivery=lambda _e, _m: None)
                    p.poll(0.01)
                except (BufferError, KafkaException):
                    time.sleep(0.05)

        writer = threading.Thread(target=load)
        writer.start()
        time.sleep(1)
        b.restart()
        time.sleep(5)
        stop.set()
        writer.join()
        with contextlib.suppress(KafkaException):  # the fatal error, if it was still to be served
            failed.flush(10)
        if failed.fatal_error is not None:
            break
    assert failed.fatal_error is not None, "three broker restarts under load left the producer usable"
    with pytest.raises(KafkaException):
        failed.produce(topic, b"x", partition=0)

    # WHEN the next invocation asks for the producer
    replacement = producer()

    # THEN it is a new one, and its records are acknowledged
    assert replacement is not failed
    errors = []
    for i in range(10):
        replacement.produce(topic, f"after-{i}".encode(), partition=i % 2, on_delivery=lambda e, _m: errors.append(e))
    assert replacement.flush(30) == 0
    assert errors == [None] * 10
    values = [r.value for records in read_topic(b.bootstrap, topic).values() for r in records]
    assert sorted(v for v in values if v.startswith(b"after-")) == sorted(f"after-{i}".encode() for i in range(10))
    # … and it stays the cached one
    assert producer() is replacement
