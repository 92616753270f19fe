"""Exactly-once mirroring (``exactly.once.source.support = enabled``): each source partition's records of a batch
and its new source offset are written in one Kafka transaction on the target.

Per source partition there is one transactional producer (``transactional.id`` named after the flow and the
partition, :func:`srm.kafka.transactions.transactional_id`). Initializing it fences every earlier producer of the
partition — an invocation still running past its timeout, another container — and aborts what that one left open.
Its transactions each hold the partition's records of one batch and, in the flow's offsets topic on the target
(MM2's ``mm2-offsets.<source>.internal``, :mod:`srm.core.source_offsets`), the last source offset they replicate
together with their offset runs. So either the records and the offset are both visible to ``read_committed``
readers, or neither is.

On every batch the records below the partition's committed next offset are left out: a retried batch (the event
source redelivers whatever it did not commit) never writes a record twice. The committed offset is read back from
the offsets topic after a producer is initialized and then followed in the container: while the producer is not
fenced, only it commits for the partition. After a failure the producer is dropped, so the next batch initializes
a new one and reads the offset back again.

The offset runs of a transaction go to the state table after its commit, idempotently. A crash between the two
leaves them only in the offsets topic: the next batch of the partition writes them to the state table before it
starts a transaction of its own, so the state never misses the runs of an earlier transaction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from confluent_kafka import KafkaException, Producer

from srm.core.events import PartitionBatch
from srm.core.offsets import Run
from srm.core.source_offsets import SourceOffset
from srm.kafka.clients import Acks
from srm.kafka.transactions import (
    TransactionalProducers,
    TransactionError,
    fenced,
    read_source_offsets,
    transactional_id,
)

__all__ = ["ExactlyOnce", "Pending"]

log = logging.getLogger(__name__)

Pending = tuple[PartitionBatch, str, Acks]  # a partition's records, its remote topic, their delivery reports
PartitionKey = tuple[str, int]


@dataclass
class _Committed:
    offset: SourceOffset | None  # the partition's newest committed offset (None: nothing committed yet)
    recorded: bool  # its runs are in the state table


class ExactlyOnce:
    """The transactions of one flow in one container (held by the App across invocations)."""

    def __init__(self, source: str, target: str, offsets_topic: str, producers: TransactionalProducers) -> None:
        self.source, self.target, self.offsets_topic = source, target, offsets_topic
        self._producers = producers
        self._reader: dict[str, str] = {}
        self._timeout_s = 30.0
        self._committed: dict[PartitionKey, _Committed] = {}
        self._open: set[PartitionKey] = set()  # partitions in a transaction not committed yet
        self._held: set[PartitionKey] = set()  # partitions this container has held a producer of
        self._abandoned: set[PartitionKey] = set()  # producers dropped with a transaction perhaps left open
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # commits of a batch's partitions, started on first use
        self._pool_lock = threading.Lock()

    def configure(self, producer: dict[str, str], reader: dict[str, str], timeout_s: float) -> None:
        """The current configuration: the target's producer and consumer settings, and the delivery timeout."""
        self._producers.base, self._producers.timeout_s = producer, timeout_s
        self._reader, self._timeout_s = reader, timeout_s

    # -- before producing ---------------------------------------------------------------------------------------
    def prepare(
        self, pending: list[Pending], record_runs: Callable[[dict[PartitionKey, list[Run]]], None]
    ) -> tuple[list[Pending], int]:
        """Initialize the batch's producers, leave out the records an earlier transaction wrote, and first put an
        earlier transaction's runs into the state table if they may be missing there (``record_runs``). Returns
        the records still to write and how many were left out."""
        self._acquire({(batch.topic, batch.partition): remote for batch, remote, _ in pending})
        with self._lock:
            committed = {(b.topic, b.partition): self._committed[(b.topic, b.partition)] for b, _, _ in pending}
        missing = {k: list(c.offset.runs) for k, c in committed.items() if c.offset and not c.recorded}
        missing = {k: runs for k, runs in missing.items() if runs}
        if missing:
            record_runs(missing)
        for c in committed.values():
            c.recorded = True
        kept: list[Pending] = []
        left_out = 0
        for batch, remote, acks in pending:
            offset = committed[(batch.topic, batch.partition)].offset
            if offset is not None and len(batch) and batch.offsets[0] <= offset.last:
                batch = _from(batch, offset.next)
                left_out += acks.expected - len(batch)
                acks = Acks(len(batch))
            kept.append((batch, remote, acks))
        return kept, left_out

    def begin(self, batch: PartitionBatch) -> Producer:
        """The partition's producer, in a new transaction."""
        key = (batch.topic, batch.partition)
        producer, _ = self._producer(key)
        try:
            producer.begin_transaction()
        except KafkaException as e:
            self._forget(key)
            raise TransactionError(f"{self._tid(key)}: cannot begin a transaction: {e.args[0]}") from None
        with self._lock:
            self._open.add(key)
        return producer

    # -- after producing ----------------------------------------------------------------------------------------
    def commit(
        self,
        pending: list[Pending],
        lasts: Mapping[PartitionKey, int],
        await_acks: Callable[[Producer, list[Pending], float], None],
        runs_of: Callable[[PartitionBatch, Acks], list[Run]],
    ) -> dict[PartitionKey, list[Run]]:
        """For each partition with records: wait for their acknowledgements, add its new source offset to the
        transaction and commit it; the partitions side by side (each commit is a few round trips to the broker).
        Returns the runs committed. A partition that fails is aborted and its producer dropped; the first failure
        is raised once every partition is done (the batch is retried; the partitions committed are left out then)."""
        work = [entry for entry in pending if len(entry[0])]  # an empty one was written before: no transaction
        if len(work) <= 1:
            done = [self._commit_partition(entry, lasts, await_acks, runs_of) for entry in work]
        else:
            pool = self._pool_of_commits()
            futures = [pool.submit(self._commit_partition, e, lasts, await_acks, runs_of) for e in work]
            wait(futures)
            done = [future.result() for future in futures]  # the first failure, after every partition finished
        runs: dict[PartitionKey, list[Run]] = {(b.topic, b.partition): [] for b, _, _ in pending}
        runs.update(done)
        return runs

    def _commit_partition(
        self,
        entry: Pending,
        lasts: Mapping[PartitionKey, int],
        await_acks: Callable[[Producer, list[Pending], float], None],
        runs_of: Callable[[PartitionBatch, Acks], list[Run]],
    ) -> tuple[PartitionKey, list[Run]]:
        batch, _, acks = entry
        key = (batch.topic, batch.partition)
        producer, _ = self._producer(key)
        try:
            await_acks(producer, [entry], self._timeout_s)
            partition_runs = runs_of(batch, acks)
            offset = SourceOffset(self.source, batch.topic, batch.partition, lasts[key], tuple(partition_runs))
            producer.produce(self.offsets_topic, offset.value(), offset.key())
            producer.commit_transaction(self._timeout_s)
        except KafkaException as e:
            self._forget(key)
            if fenced(e):
                raise TransactionError(
                    f"{self._tid(key)}: fenced by a newer invocation of {batch.topic}-{batch.partition}; "
                    "nothing of this one is committed"
                ) from None
            raise TransactionError(f"{self._tid(key)}: transaction not committed: {e.args[0]}") from None
        except Exception:
            self._forget(key)
            raise
        with self._lock:
            self._committed[key] = _Committed(offset, recorded=False)
            self._open.discard(key)
        return key, partition_runs

    def recorded(self, keys: Iterable[PartitionKey]) -> None:
        """The runs of these partitions' last transactions are in the state table now."""
        with self._lock:
            for key in keys:
                if key in self._committed:
                    self._committed[key].recorded = True

    @contextlib.contextmanager
    def abandoning(self, batches: Iterable[PartitionBatch]) -> Iterator[None]:
        """When the block fails: drop the producers of the batch's transactions still open (the next producer of
        the partition aborts what they left)."""
        try:
            yield
        except BaseException:
            for batch in batches:
                key = (batch.topic, batch.partition)
                with self._lock:
                    is_open = key in self._open
                if is_open:
                    self._forget(key)
            raise

    def warm(self, topic: str, remote: str, partitions: Iterable[int]) -> None:
        """Initialize the producers of partitions just assigned and read their committed offsets back, before their
        first batch comes: it then waits for neither (a topic's first batch took 0.6–1.5 s more). The same fencing as
        at a first batch: every earlier producer of these partitions is fenced."""
        self._acquire({(topic, p): remote for p in partitions})

    # -- internals ----------------------------------------------------------------------------------------------
    def _acquire(self, remotes: Mapping[PartitionKey, str]) -> None:
        """Each partition's producer initialized (fencing earlier ones), the producers of its topic's partitions held
        elsewhere fenced when this container first holds one of them, and the committed offset read back where it
        is not known (``remotes``: partition → its remote topic)."""
        unknown: list[PartitionKey] = []
        acquired: dict[str, tuple[str, Producer]] = {}  # topics of partitions first held now: (remote, a producer)
        producers = self._producers_of(list(remotes))
        for key, remote in remotes.items():
            producer, initialized = producers[key]
            with self._lock:
                if initialized or key not in self._committed:
                    unknown.append(key)
                if key not in self._held:
                    acquired.setdefault(key[0], (remote, producer))
        for topic, (remote, producer) in acquired.items():
            self._fence_others(topic, remote, producer)  # a failure: the batch is retried, fencing again
        with self._lock:
            self._held.update(remotes)
            self._abandoned -= set(remotes)  # their new producers' initialization aborted what was left open
            abandoned = set(self._abandoned)
        for key in sorted(abandoned):
            self._fence_abandoned(key)
        if not unknown:
            return
        wanted = [(self.source, t, p) for t, p in unknown]
        found = read_source_offsets(self._reader, self.offsets_topic, wanted, self._timeout_s)
        with self._lock:
            for key in unknown:
                self._committed[key] = _Committed(found.get(key), recorded=False)
        for key in unknown:  # rare (a partition taken over, or a failed transaction): what a duplicate traces to
            offset = found.get(key)
            log.info(
                "%s-%d: committed source offset read back from %s: %s",
                *key,
                self.offsets_topic,
                f"next {offset.next}" if offset else "none",
            )

    def _fence_others(self, topic: str, remote: str, producer: Producer) -> None:
        """Fence the producers of the topic's partitions this container holds none of. The read back waits out the
        transactions open in the offsets topic, and those of a crashed container, of partitions not in this batch,
        would stay open a transaction timeout: their next holder may be this container, whose next batch waits for
        this one. A live holder's transaction is aborted once, and its batch retried (never fencing again)."""
        try:
            partitions = len(producer.list_topics(remote, timeout=self._timeout_s).topics[remote].partitions)
        except (KafkaException, KeyError):
            return  # the read back then waits for those transactions, or fails and the batch is retried
        for p in range(partitions):
            if not self._producers.holds(topic, p):
                self._producers.fence(self._tid((topic, p)))

    def _fence_abandoned(self, key: PartitionKey) -> None:
        """Abort what a producer this container dropped (its broker went away mid-transaction) may have left open,
        unless the partition has a producer again: the read back would otherwise wait that transaction's timeout
        whenever the retried batch does not hold its partition."""
        if not self._producers.holds(*key):
            self._producers.fence(self._tid(key))  # a failure: the batch is retried, fencing again
        with self._lock:
            self._abandoned.discard(key)

    def _tid(self, key: PartitionKey) -> str:
        return transactional_id(self.source, self.target, *key)

    def _producer(self, key: PartitionKey) -> tuple[Producer, bool]:
        return self._producers.get(key[0], key[1], self._tid(key))

    def _producers_of(self, keys: list[PartitionKey]) -> dict[PartitionKey, tuple[Producer, bool]]:
        """The partitions' producers, those not initialized yet side by side: each initialization is a few round
        trips to the transaction coordinator, and a topic's first batch holds all of its partitions. The first
        failure is raised once every initialization is done."""
        new = [key for key in keys if not self._producers.holds(*key)]
        if len(new) <= 1:
            return {key: self._producer(key) for key in keys}
        futures = {key: self._pool_of_commits().submit(self._producer, key) for key in new}
        wait(futures.values())
        found = {key: future.result() for key, future in futures.items()}
        return {key: found[key] if key in found else self._producer(key) for key in keys}

    def _pool_of_commits(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="srm-commit")
            return self._pool

    def _forget(self, key: PartitionKey) -> None:
        """Drop the producer (the next one's initialization aborts what this one left open) and the offset."""
        self._producers.discard(*key)
        with self._lock:
            self._committed.pop(key, None)
            if key in self._open:
                self._abandoned.add(key)
            self._open.discard(key)


def _from(batch: PartitionBatch, start: int) -> PartitionBatch:
    """The batch's records at or after ``start``."""
    i = next((i for i, o in enumerate(batch.offsets) if o >= start), len(batch))
    return replace(
        batch,
        offsets=batch.offsets[i:],
        keys=batch.keys[i:],
        values=batch.values[i:],
        timestamps=batch.timestamps[i:],
        headers=batch.headers[i:],
    )
