"""A replicated source topic deleted and recreated under the same name while records are produced to it, under `srm
run`: the reset is detected (Apache Kafka gives the new topic a new id), reported in the log and by `srm-control
status`, the old incarnation's offset runs are archived, and every record of the new incarnation reaches the remote
topic after the old incarnation's, in order."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from tests.support.kafka import (
    Rec,
    admin,
    assert_no_loss,
    create_topic,
    list_topic_names,
    read_partition,
    read_topic,
    unique,
    wait_for,
)
from tests.support.runtime import SrmRun, run_cli, wait_log, write_config
from tests.support.state import state_store

pytestmark = pytest.mark.e2e

PARTITIONS = 2
OLD = 300  # records of each partition replicated before the topic is deleted


class Traffic:
    """Distinct numbered records produced round-robin to the partitions of ``topic``, about 200 a second, until
    stopped; ``acked`` holds the values the source acknowledged, by partition, in order. The producer never creates
    the topic (the brokers would auto-create it while it is deleted) and sends one request at a time, so what was
    acknowledged is in the log in that order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "allow.auto.create.topics": False,
                "acks": "all",
                "enable.idempotence": False,  # its sequence numbers cannot outlive the topic they were for
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": 5,
                "message.timeout.ms": 10_000,
                "log_level": 0,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.partition()].append(msg.value())

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for _ in range(2):
                try:
                    self._producer.produce(
                        self.topic, f"{self.topic}-v{n}".encode(), partition=n % PARTITIONS, on_delivery=self._delivered
                    )
                    n += 1
                except (BufferError, KafkaException):
                    break
            self._producer.poll(0)
            self._stop.wait(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(30)


def recreate(bootstrap: str, topic: str) -> None:
    """Delete the topic, wait until the broker no longer lists it, create it again with as many partitions."""
    client = admin(bootstrap)  # the client must outlive its future
    client.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in list_topic_names(bootstrap), 30, interval=0.05, message=f"{topic} deleted")
    create_topic(bootstrap, topic, PARTITIONS)


def values(records: list[Rec]) -> list[bytes | None]:
    return [r.value for r in records]


def test_topic_recreated_under_traffic_is_reported_and_its_new_records_follow_the_old(clusters, tmp_path: Path):
    # GIVEN srm run replicating a topic that records are being produced to, OLD records of it replicated
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("reset")
    remote = f"a.{topic}"
    create_topic(a, topic, PARTITIONS)
    config = write_config(
        tmp_path / "srm.yaml",
        {"a": a, "b": b},
        {"a->b": {"topics": topic}},
        **{"heartbeats.replication.enabled": False},
    )
    with SrmRun(config, tmp_path) as run:
        traffic = Traffic(a, topic)
        try:
            wait_for(
                lambda: (have := read_topic(b, remote)) and all(len(r) >= OLD for r in have.values()),
                timeout=60,
                message=f"{OLD} records of each partition in {remote}",
            )

            # WHEN the topic is deleted and created again, the producer going on, and records keep coming
            recreate(a, topic)
            time.sleep(1)
        finally:
            traffic.stop()
        new = {p: read_partition(a, topic, p) for p in range(PARTITIONS)}
        assert all(len(records) >= 50 for records in new.values()), {p: len(r) for p, r in new.items()}

        # THEN every partition's reset is logged: the topic id changed
        for p in range(PARTITIONS):
            wait_log(run, f"a->b topic reset: {topic}-{p} started over (topic id ", timeout=30)

        # AND every record of the new incarnation reaches the remote topic, after the old incarnation's
        def arrived() -> bool:
            return all(new[p][-1].value in values(read_partition(b, remote, p)) for p in range(PARTITIONS))

        wait_for(arrived, timeout=30, message=f"the new incarnation's records in {remote}")
        state = state_store(tmp_path)
        for p in range(PARTITIONS):
            replicated = read_partition(b, remote, p)
            start = values(replicated).index(new[p][0].value)
            # what came before is the old incarnation as it was acknowledged, in order, up to where the mirror had
            # read it when it was deleted (the rest went with it)
            old = [v for v in traffic.acked[p] if v not in set(values(new[p]))]
            assert values(replicated[:start]) == old[:start], f"{remote}-{p}"
            # The new incarnation stays below that offset, so the event source's consumer, fetching on from there,
            # is sent back to the log start. (One that outgrows it before the consumer fetches again is read from
            # there: librdkafka keeps a subscribed consumer's position across a recreation, and the new records
            # below it are neither replicated nor detected.)
            assert len(new[p]) < start <= len(old), (
                f"{remote}-{p}: {start} old records of {len(old)}, {len(new[p])} new"
            )
            # and what came after is the new incarnation: nothing lost, nothing out of order
            assert_no_loss(new[p], replicated[start:])
            # whose offset runs start at its own offset 0, onto the remote offset after the old records
            runs = state.runs("a", "b", topic, p)
            assert (runs[0].upstream, runs[0].downstream) == (0, start), runs
        # and the event source, read to the new log end, is not left resuming beyond it
        assert run.output().count("resumes at") <= PARTITIONS, run.output()[-3000:]

        # AND srm-control status lists the reset of both partitions, saying why
        result = run_cli("srm-control", "--local", "status", "--timeout", "10", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        for p in range(PARTITIONS):
            assert f"TOPIC RESET {topic}-{p} started over (topic id " in result.stdout, result.stdout
        result = run_cli("srm-control", "--local", "status", "--json", "--timeout", "10", cwd=tmp_path)
        (status,) = [s for s in json.loads(result.stdout) if s["flow"] == "a->b"]
        resets = {r["partition"]: r for r in status["topicResets"] if r["topic"] == topic}
        assert sorted(resets) == list(range(PARTITIONS)), status["topicResets"]
        assert all(r["reason"].startswith("topic id ") for r in resets.values()), resets
        assert run.alive(), run.output()[-2000:]
