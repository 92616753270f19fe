"""The per-record cost of Single Message Transforms in the mirror (``--only transforms``): the mirror's own transform
step on a batch of the small workload's shape (200 B values, a key and three headers each, 10,000 records: a full
event), with no chain configured and with a three-step chain (InsertHeader, DropHeaders, a Filter with a predicate),
beside the copy loop's cost per record. Pure CPU, no cluster: what a chain adds to each record's path."""

from __future__ import annotations

import statistics
import time
from typing import Any

from srm.core.events import PartitionBatch
from srm.core.transforms import TransformChain, build_chain

__all__ = ["THREE_STEPS", "measure"]

BATCH = 10_000
# stamp an origin header, strip an internal one, drop records that carry a header marking them private
THREE_STEPS = {
    "transforms": "origin, strip, private",
    "transforms.origin.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.origin.header": "origin",
    "transforms.origin.value.literal": "us-west",
    "transforms.strip.type": "org.apache.kafka.connect.transforms.DropHeaders",
    "transforms.strip.headers": "trace",
    "transforms.private.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.private.predicate": "isPrivate",
    "predicates": "isPrivate",
    "predicates.isPrivate.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
    "predicates.isPrivate.name": "private",
}


def _batch() -> PartitionBatch:
    """Records like the bench workload's: a key, a 200 B value and three headers (one in 100 marked private)."""
    value = b"x" * 200
    headers = [
        [("trace", b"%016d" % i), ("source", b"bench"), ("private" if i % 100 == 0 else "seq", b"%d" % i)]
        for i in range(BATCH)
    ]
    return PartitionBatch(
        "bench.small",
        0,
        list(range(BATCH)),
        [b"customer-%05d" % (i % 100_000) for i in range(BATCH)],
        [value] * BATCH,
        [1_700_000_000_000 + i for i in range(BATCH)],
        headers,  # type: ignore[arg-type]
    )


def _step(chain: TransformChain, batch: PartitionBatch) -> PartitionBatch:
    """What the mirror does with a partition's records (srm.replication.mirror): one branch per batch, the chain
    only when one is configured."""
    if chain and len(batch):
        batch, _ = chain.apply(batch)
    return batch


def _ns_per_record(chain: TransformChain, batch: PartitionBatch, rounds: int) -> float:
    """The median over ``rounds`` of one batch's time through :func:`_step`, per record."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        _step(chain, batch)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / len(batch)


def measure(copy_loop_records_per_s: float | None, rounds: int = 30) -> dict[str, Any]:
    """ns per record: no chain, the three-step chain, and the copy loop (from its records/s, when known)."""
    batch = _batch()
    empty, three = TransformChain(), build_chain({k: (v, k) for k, v in THREE_STEPS.items()})
    kept, dropped = three.apply(batch)
    _ns_per_record(three, batch, 3)  # warm up
    out: dict[str, Any] = {
        "batch_records": BATCH,
        "empty_chain_ns_per_record": round(_ns_per_record(empty, batch, rounds), 3),
        "three_step_chain_ns_per_record": round(_ns_per_record(three, batch, rounds), 1),
        "three_step_chain": three.describe(),
        "three_step_dropped_per_batch": dropped,
    }
    if copy_loop_records_per_s:
        out["copy_loop_ns_per_record"] = round(1e9 / copy_loop_records_per_s, 1)
        out["three_step_vs_copy_loop"] = round(
            out["three_step_chain_ns_per_record"] / out["copy_loop_ns_per_record"], 3
        )
    assert len(kept) + dropped == BATCH
    return out


def line(result: dict[str, Any]) -> str:
    """The result as the summary prints it."""
    copy = result.get("copy_loop_ns_per_record")
    beside = f"; the copy loop {copy:,.0f} ns per record" if copy else ""
    return (
        f"transforms, per record: no chain {result['empty_chain_ns_per_record']:.3f} ns (one branch per batch of "
        f"{result['batch_records']:,}), three steps {result['three_step_chain_ns_per_record']:,.0f} ns "
        f"({' → '.join(s.split(':')[0] for s in result['three_step_chain'])}){beside}"
    )
