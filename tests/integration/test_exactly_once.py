"""Exactly-once mirroring in-process, on a real broker (the shared clusters) with the state table on moto: a zombie
invocation fenced by its retry, a crash between the commit and the state write, redelivered batches left out, and
the committed source offsets in MM2's offsets topic format."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

import srm.app.mirror
import srm.replication.mirror
from srm.app import App
from srm.core.events import parse_event
from srm.core.offsets import translate
from srm.core.source_offsets import SourceOffset
from srm.handlers.mirror import lambda_handler
from srm.kafka.transactions import read_source_offsets, transactional_id
from srm.replication.context import MirrorError
from srm.replication.mirror import replicate_batch
from srm.state import StateError
from tests.support.handler import CONTEXT, HandlerFlow, kafka_event
from tests.support.kafka import (
    Rec,
    assert_identical,
    create_topic_with_records,
    numbered_records,
    produce,
    read_partition,
    read_topic,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]  # also run on the compatibility tier's Kafka


@pytest.fixture
def flow(handler_flow: HandlerFlow) -> dict[str, Any]:
    """An exactly-once flow a->b selecting ``<prefix>.*``; the handler's env set, and ``container()`` building
    another App (another Lambda container) on the same tables."""
    prefix = unique("eos")
    handler_flow.configure(
        prefix, {"exactly.once.source.support": "enabled"}, shared={"mirror.delivery.timeout.ms": "20000"}
    )
    return {"a": handler_flow.a, "b": handler_flow.b, "prefix": prefix, "container": handler_flow.container}


class PausedCommit(Producer):
    """A real transactional producer whose commit waits until released: an invocation stalled past its timeout
    (a long GC pause, a slow network) with its transaction open."""

    armed = False  # producers built meanwhile pause
    committing = threading.Event()
    release = threading.Event()

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.paused = PausedCommit.armed

    def commit_transaction(self, *args: Any) -> None:
        if self.paused:
            PausedCommit.committing.set()
            PausedCommit.release.wait(60)
        super().commit_transaction(*args)


def source_records(a: str, topic: str, partitions: int) -> dict[int, list[Rec]]:
    return {p: read_partition(a, topic, p) for p in range(partitions)}


def source_topic(flow: dict[str, Any], name: str, partitions: int, count: int) -> tuple[str, dict[int, list[Rec]]]:
    """The topic ``<prefix>.<name>`` on a, holding ``count`` numbered records over ``partitions``; and its records."""
    topic = f"{flow['prefix']}.{name}"
    create_topic_with_records(flow["a"], topic, partitions, count)
    return topic, source_records(flow["a"], topic, partitions)


def assert_runs_exact(app: App, topic: str, source: dict[int, list[Rec]], remote_topic: str, b: str) -> None:
    """Every replicated source offset translates to the offset of its one committed copy on the target."""
    for p, recs in source.items():
        runs = app.state.runs("a", "b", topic, p)
        landed = {r.content(): r.offset for r in read_partition(b, remote_topic, p)}
        for rec in recs:
            assert translate(runs, rec.offset) == landed[rec.content()], f"{topic}-{p}@{rec.offset}"


@contextlib.contextmanager
def stalled_zombie(
    flow: dict[str, Any], event: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[BaseException | None]]:
    """An invocation of ``event`` in another container that writes the batch and stalls before committing (past its
    timeout): the block runs while it waits, its transaction open; then it wakes up and commits. Yields where its
    outcome goes (None, or what it raised)."""
    monkeypatch.setattr(srm.app.mirror, "Producer", PausedCommit)  # where the mirror wiring builds them
    monkeypatch.setattr(PausedCommit, "armed", True)
    zombie_ctx = flow["container"]().mirror_context()
    PausedCommit.committing.clear()
    PausedCommit.release.clear()
    outcome: list[BaseException | None] = []

    def run_zombie() -> None:
        try:
            replicate_batch(parse_event(event)[1], zombie_ctx)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run_zombie)
    thread.start()
    try:
        assert PausedCommit.committing.wait(30), "the zombie never reached its commit"
        PausedCommit.armed = False
        yield outcome
    finally:
        PausedCommit.release.set()
        thread.join(60)


def test_zombie_invocation_is_fenced_by_its_retry_and_nothing_is_duplicated(flow, monkeypatch):
    # GIVEN 2 partitions of records and the event that carries them
    a, b = flow["a"], flow["b"]
    topic, source = source_topic(flow, "orders", 2, 300)
    event = kafka_event(a, topic, source)

    # WHEN an invocation in one container writes the batch and stalls before committing (past its timeout) …
    with stalled_zombie(flow, event, monkeypatch) as outcome:
        # … the event source's retry of the same batch runs in another container and completes …
        retry = lambda_handler(event, CONTEXT)
    # … and then the zombie wakes up and commits

    # THEN the zombie was fenced: it failed, and its records (written before the retry began) were aborted
    assert isinstance(outcome[0], MirrorError), outcome
    assert "fenced" in str(outcome[0])
    assert retry["records"] == 300
    remote = f"a.{topic}"
    counts = assert_identical(a, topic, b, remote)  # read_committed: every record exactly once, in order
    uncommitted = sum(len(read_partition(b, remote, p, isolation="read_uncommitted")) for p in range(2))
    print(f"\nzombie: committed {sum(counts.values())} records once; {uncommitted - 300} aborted copies on the target")
    assert uncommitted > 300, "the zombie wrote nothing before it was fenced: the test proves nothing"
    # … the offset runs map every source offset to its one committed copy
    assert_runs_exact(App.current(), topic, source, remote, b)

    # WHEN the event source delivers the batch once more (its commit was lost)
    again = lambda_handler(event, CONTEXT)

    # THEN nothing is written again
    assert again["records"] == 0 and again["alreadyWritten"] == 300
    assert assert_identical(a, topic, b, remote) == counts


def test_partitions_readied_on_assignment_fence_the_previous_holder_before_any_batch(flow, monkeypatch):
    # GIVEN an invocation in one container stalled before its commit, its transaction open (as above)
    a, b = flow["a"], flow["b"]
    topic, source = source_topic(flow, "assigned", 2, 200)
    event = kafka_event(a, topic, source)
    with stalled_zombie(flow, event, monkeypatch) as outcome:
        # WHEN the partitions are assigned to another container's event source, which readies them (no batch yet)
        App.current().partitions_assigned(topic, [0, 1])

    # THEN the zombie was fenced by the readying alone: nothing of it is committed
    assert isinstance(outcome[0], MirrorError) and "fenced" in str(outcome[0]), outcome
    remote = f"a.{topic}"
    assert sum(len(read_partition(b, remote, p)) for p in range(2)) == 0
    # WHEN the new holder's first batch comes THEN it writes every record once, with exact offset runs
    assert lambda_handler(event, CONTEXT)["records"] == 200
    assert_identical(a, topic, b, remote)
    assert_runs_exact(App.current(), topic, source, remote, b)


def test_crash_between_commit_and_state_write_loses_no_mapping_and_duplicates_nothing(flow, monkeypatch):
    # GIVEN a batch committed by a container that dies before it writes the offset runs to the state table
    a, b = flow["a"], flow["b"]
    topic, first = source_topic(flow, "pay", 1, 200)

    def crash(*args: object) -> None:
        raise StateError("the container died before writing its state")

    with monkeypatch.context() as m:
        m.setattr(srm.replication.mirror, "_record_runs", crash)
        with pytest.raises(StateError):
            replicate_batch(parse_event(kafka_event(a, topic, first))[1], flow["container"]().mirror_context())
    remote = f"a.{topic}"
    assert len(read_partition(b, remote, 0)) == 200  # committed, though the batch failed

    # WHEN the event source redelivers it, with more records, to another container
    produce(a, topic, numbered_records(50, 1, topic, start=200))
    source = source_records(a, topic, 1)
    result = lambda_handler(kafka_event(a, topic, source), CONTEXT)

    # THEN the committed records are left out, only the new ones written: each record once
    assert (result["records"], result["alreadyWritten"]) == (50, 200)
    assert assert_identical(a, topic, b, remote) == {0: 250}
    # … and the state holds the runs of both transactions: the first put back from the offsets topic
    assert_runs_exact(App.current(), topic, source, remote, b)


def test_source_offsets_are_in_mm2s_offsets_topic_format(flow):
    # GIVEN an exactly-once flow that replicated 40 records of one partition in two batches
    a, b = flow["a"], flow["b"]
    topic, source = source_topic(flow, "fmt", 1, 40)
    lambda_handler(kafka_event(a, topic, {0: source[0][:25]}), CONTEXT)
    lambda_handler(kafka_event(a, topic, {0: source[0][25:]}), CONTEXT)

    # THEN the offsets topic on the target holds Connect's key for MirrorSourceConnector and MM2's value (the last
    # source offset replicated), with the transaction's offset runs beside it
    key = json.dumps(["MirrorSourceConnector", {"cluster": "a", "partition": 0, "topic": topic}], separators=(",", ":"))
    ours = [r for r in read_topic(b, "mm2-offsets.a.internal")[0] if r.key == key.encode()]
    values = [json.loads(r.value or b"") for r in ours]
    remote = read_partition(b, f"a.{topic}", 0)
    # the second transaction's records start after the first one's commit marker
    assert values == [
        {"offset": 24, "runs": [[0, 0, 25]]},
        {"offset": 39, "runs": [[25, 26, 15]]},
    ]
    assert [r.offset for r in remote] == [*range(25), *range(26, 41)]


def open_transaction(b: str, tid: str, offsets_topic: str, offset: SourceOffset) -> Producer:
    """A producer of ``tid`` that wrote ``offset`` to the offsets topic in a transaction it leaves open (a container
    that crashed mid-transaction); kept by the caller, so the broker holds it open a minute."""
    # quiet: it outlives the test (and the clusters, at the session's end) and would log every failed reconnect
    config = {"bootstrap.servers": b, "transactional.id": tid, "transaction.timeout.ms": 60_000, "log_level": 0}
    producer = Producer(config)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(offsets_topic, offset.value(), offset.key())
    producer.flush(30)
    return producer


def test_offsets_read_back_waits_out_an_open_transaction_and_finds_one_committed_after_it(flow):
    # GIVEN a transaction left open in the offsets topic, then a newer committed offset of a partition after it
    b, topic = flow["b"], f"{flow['prefix']}.late"
    offsets = unique("offsets")
    create_topic_with_records(b, offsets, 1, 0)
    stuck = open_transaction(b, unique("tid"), offsets, SourceOffset("a", f"{topic}-other", 0, 9))
    committed = Producer({"bootstrap.servers": b, "transactional.id": unique("tid"), "log_level": 0})
    committed.init_transactions(30)
    for last in (4, 7):
        committed.begin_transaction()
        committed.produce(offsets, SourceOffset("a", topic, 0, last).value(), SourceOffset("a", topic, 0, last).key())
        committed.commit_transaction(30)
    # WHEN the offset is read back, and the open transaction is aborted a moment later
    found: list[Any] = []
    reader = threading.Thread(
        target=lambda: found.append(read_source_offsets({"bootstrap.servers": b}, offsets, [("a", topic, 0)], 30))
    )
    reader.start()
    reader.join(2)
    still_reading = reader.is_alive()
    stuck.abort_transaction(30)
    reader.join(30)
    # THEN the read waited for it, and found the newest committed offset (not the one before the open transaction)
    assert still_reading, "the read ended at the last stable offset, below a committed transaction"
    assert found and found[0][(topic, 0)].last == 7, found


def test_a_container_taking_over_one_partition_fences_the_open_transactions_of_the_others(flow):
    # GIVEN 4 partitions replicated once, then a container that crashed with a transaction open on every partition
    a, b = flow["a"], flow["b"]
    topic, source = source_topic(flow, "crash", 4, 200)
    replicate_batch(parse_event(kafka_event(a, topic, source))[1], flow["container"]().mirror_context())
    left_open = [
        open_transaction(
            b, transactional_id("a", "b", topic, p), "mm2-offsets.a.internal", SourceOffset("a", topic, p, 99)
        )
        for p in range(4)
    ]
    # WHEN another container gets partition 0's records again (the event source redelivers what it did not commit)
    produce(a, topic, numbered_records(4, 4, topic, start=200))
    again = {0: read_partition(a, topic, 0)}
    result = lambda_handler(kafka_event(a, topic, again), CONTEXT)
    # THEN it fenced the crashed producers of partitions 1-3 too (its read back would wait out their transactions
    # otherwise), found partition 0's committed offset, and wrote only the new record
    assert (result["records"], result["alreadyWritten"]) == (1, 50)
    assert [r.value for r in read_partition(b, f"a.{topic}", 0)] == [r.value for r in again[0]]
    assert len(left_open) == 4


class LostBrokerOnCommit(Producer):
    """A real transactional producer whose commit fails as when the target broker goes away mid-commit, for the
    transactional ids listed in ``failing``: its transaction stays open on the broker."""

    failing: frozenset[str] = frozenset()

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.tid = conf.get("transactional.id")

    def commit_transaction(self, *args: Any) -> None:
        if self.tid in LostBrokerOnCommit.failing:
            self.flush(30)  # the commit sends what the transaction holds (the source offset too), then fails
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker went away (injected)"))
        super().commit_transaction(*args)


def test_a_transaction_dropped_mid_commit_is_aborted_before_a_retry_without_its_partition_reads_back(flow, monkeypatch):
    # GIVEN a batch of 2 partitions whose commits fail as when the target broker goes away: the transactions are
    # left open on the broker and their producers dropped
    a, b = flow["a"], flow["b"]
    topic, source = source_topic(flow, "dropped", 2, 100)
    monkeypatch.setattr(srm.app.mirror, "Producer", LostBrokerOnCommit)
    monkeypatch.setattr(LostBrokerOnCommit, "failing", frozenset(transactional_id("a", "b", topic, p) for p in (0, 1)))
    container = flow["container"]()
    with pytest.raises(MirrorError, match="broker went away"):
        replicate_batch(parse_event(kafka_event(a, topic, source))[1], container.mirror_context())
    monkeypatch.setattr(LostBrokerOnCommit, "failing", frozenset())

    # WHEN the event source redelivers only partition 0 to the same container, with one more record
    produce(a, topic, numbered_records(2, 2, topic, start=100))
    again = {0: read_partition(a, topic, 0)}
    result = replicate_batch(parse_event(kafka_event(a, topic, again))[1], container.mirror_context())

    # THEN partition 1's open transaction was aborted before the read back (which would wait out its timeout):
    # partition 0 is written once, and nothing of partition 1 is visible
    assert (result.records, result.already_written) == (51, 0), result
    assert [r.value for r in read_partition(b, f"a.{topic}", 0)] == [r.value for r in again[0]]
    assert read_partition(b, f"a.{topic}", 1) == []
