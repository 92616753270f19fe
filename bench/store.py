"""``python -m bench.store``: the local runtime's state, on what the mirror asks of it: the time until the state
answers, a batch's state write (a partition's offset runs, ``StateStore.record_runs``) one at a time, and six at once
(a batch of six partitions), with the CPU taken.

``topic`` is the state port's Kafka adapter in this process (what ``srm run`` uses: each partition's writes in its own
fenced transactions). The DynamoDB emulation over a compacted topic that ``srm run`` kept its state (and then its
config, nodes and metrics tables) in before was retired; its last measurement beside ``topic`` (``make bench`` at
commit abe2ef5, ``bench/results.json``): a write 1.84 ms, six at once 16.66 ms, 1.32 CPU-s, against the topic's
7.89 ms, 17.55 ms and 0.56 CPU-s."""

from __future__ import annotations

import argparse
import concurrent.futures
import resource
import shutil
import tempfile
import time
from pathlib import Path

from srm.core.offsets import Run
from srm.kafka.state import KafkaState
from srm.local.clusters import LocalCluster
from srm.state import StateStore


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _topic(bootstrap: str, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{prefix}.bench-{time.time_ns()}.internal"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(30)
    return topic


def _timed(state: StateStore, writes: int) -> tuple[float, float]:
    """A partition's state write one at a time, and six partitions' at once (ms each)."""
    state.record_runs("a", "b", "t", 0, [Run(0, 0, 100)])
    begin = time.monotonic()
    for i in range(1, writes + 1):
        state.record_runs("a", "b", "t", 0, [Run(i * 100, i * 100, 100)])
    one_ms = (time.monotonic() - begin) / writes * 1000
    begin = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for i in range(1, writes // 6 + 1):
            run = [Run(i * 100, i * 100, 100)]
            list(pool.map(lambda p, run=run: state.record_runs("a", "b", "t", p + 1, run), range(6)))
    six_ms = (time.monotonic() - begin) / (writes // 6) * 1000
    return one_ms, six_ms


def measure(kind: str, workdir: Path, bootstrap: str, writes: int) -> dict[str, float]:
    if kind != "topic":
        raise ValueError(f"unknown state kind {kind!r}: topic (the DynamoDB emulation, kafka, was retired)")
    cpu, started = _cpu_s(), time.monotonic()
    conf = {"bootstrap.servers": bootstrap}
    topic_state = KafkaState(_topic(bootstrap, "srm-state"), conf, dict(conf)).start()
    topic_state.claim_partitions("a", "b", "t", range(7))  # as a worker does when the partitions are assigned
    ready_s = time.monotonic() - started
    one_ms, six_ms = _timed(topic_state, writes)
    topic_state.stop()
    return {"ready_s": ready_s, "write_ms": one_ms, "six_writes_ms": six_ms, "cpu_s": _cpu_s() - cpu}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--kinds", default="topic", help="comma-separated: topic (the only one left)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-store-"))
    cluster = LocalCluster("b", workdir / "kafka" / "data")
    cluster.start()
    try:
        print("| store | answers after | a state write | six at once (a batch of 6 partitions) | CPU-s |")
        print("|---|---:|---:|---:|---:|")
        for kind in args.kinds.split(","):
            m = measure(kind, workdir, cluster.bootstrap, args.writes)
            print(
                f"| {kind} | {m['ready_s']:.1f} s | {m['write_ms']:.1f} ms | {m['six_writes_ms']:.1f} ms | "
                f"{m['cpu_s']:.1f} |",
                flush=True,
            )
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
