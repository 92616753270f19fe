"""End to end: ``srm run`` (supervisor, moto's DynamoDB server, one worker per flow, emulated event source mappings)
replicating a backlog, then a steady live stream whose replication latency is measured record by record (target
arrival − record timestamp). A scenario runs at-least-once or exactly-once (``Scenario.exactly_once``), read back as
``read_committed`` consumers see it."""

from __future__ import annotations

import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.measure import PathResult, peak_rss_mb, process_cpu_seconds, process_label
from bench.mm2 import Mm2Run, mm2_properties
from bench.process import Replicator
from bench.workload import CommittedWatch, OffsetWatch, Workload, committed_census, end_offsets, record_stream

__all__ = ["LiveResult", "Scenario", "SrmRun", "run_scenario"]


@dataclass(frozen=True)
class Scenario:
    """One ``srm run`` with its own cluster aliases (so its remote topics and consumer groups are its own)."""

    name: str
    source: str
    target: str
    batch_size: int | None  # event.source.batch.size; None: not set (srm's default)
    batching_window_ms: int | None  # event.source.batching.window.ms; None: not set
    backlog: tuple[Workload, ...]
    label: str = ""
    live: Workload | None = None  # a topic replicated by the same flow, for the live stream
    live_rate: int = 10_000  # records/s
    live_seconds: float = 20.0
    time_box_s: float | None = None  # stop measuring the backlog after this long (a slow configuration)
    replicator: str = "srm"  # or "mm2": MirrorMaker 2 in dedicated mode (bench.mm2)
    exactly_once: bool = False  # exactly.once.source.support=enabled (srm's flow; MM2's target cluster)
    cpus: str | None = None  # pin the replicator to these cores (taskset -c), e.g. "1"
    nodes: int = 1  # srm run processes with the same config (a cluster of nodes sharing the partitions)
    workers: int = 1  # srm run --workers: worker processes per flow on each node
    join_at_s: float | None = None  # one more node joins this long into the live stream (the rebalance pause)


@dataclass
class LiveResult:
    rate: int
    seconds: float
    records: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def pct(p: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 1) if ordered else -1

        return {
            "rate": self.rate,
            "seconds": self.seconds,
            "records": self.records,
            "received": len(ordered),
            "p50_ms": round(statistics.median(ordered), 1) if ordered else -1,
            "p99_ms": pct(0.99),
            "max_ms": round(ordered[-1], 1) if ordered else -1,
        }


class SrmRun(Replicator):
    """``srm run --config FILE`` as a user starts it (the supervisor, its workers and store); stopped with SIGINT."""

    stop_signal = signal.SIGINT

    def __init__(self, config: Path, workdir: Path, cpus: str | None = None, workers: int = 1) -> None:
        command = [sys.executable, "-m", "srm.cli.srm", "run", "--config", str(config), "--workers", str(workers)]
        super().__init__(["taskset", "-c", cpus, *command] if cpus else command, workdir, "srm-run.log")


class SrmNodes:
    """``nodes`` ``srm run`` with one config, each in a directory of its own: a cluster of nodes."""

    def __init__(self, config: Path, workdir: Path, nodes: int, cpus: str | None = None) -> None:
        self.config, self.workdir, self.cpus = config, workdir, cpus
        self.runs: list[SrmRun] = []
        for _ in range(nodes):
            self.add()
        self.process = self.runs[0].process

    def add(self) -> None:
        workdir = self.workdir / f"node{len(self.runs) + 1}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.runs.append(SrmRun(self.config, workdir, self.cpus))

    def pids(self) -> list[int]:
        return [pid for run in self.runs for pid in run.pids()]

    def output(self) -> str:
        return "".join(run.output() for run in self.runs)

    def stop(self) -> None:
        for run in self.runs:
            run.stop()


def _config(scenario: Scenario, bootstraps: tuple[str, str], topics: list[str]) -> dict[str, Any]:
    return {
        "clusters": {
            scenario.source: {"bootstrap.servers": bootstraps[0]},
            scenario.target: {"bootstrap.servers": bootstraps[1]},
        },
        "flows": {
            f"{scenario.source}->{scenario.target}": {
                "enabled": True,
                "topics": ", ".join(t.replace(".", "\\.") for t in topics),
            }
            | ({"exactly.once.source.support": "enabled"} if scenario.exactly_once else {})
        },
        "replication.factor": 1,
        "offset-syncs.topic.replication.factor": 1,
        "heartbeats.topic.replication.factor": 1,
        "checkpoints.topic.replication.factor": 1,
    } | {
        key: value
        for key, value in (
            ("event.source.batch.size", scenario.batch_size),
            ("event.source.batching.window.ms", scenario.batching_window_ms),
        )
        if value is not None
    }


class _Progress:
    """Samples the records on the remote topics until they reach the source's (or a deadline): their end offsets, or
    where an exactly-once writer's commit markers take offsets too, the source position of the last committed
    record."""

    def __init__(self, bootstrap: str, targets: dict[str, list[int]], exactly_once: bool = False) -> None:
        self.bootstrap = bootstrap
        self.targets = targets
        self.wanted = sum(sum(v) for v in targets.values())
        self.watch = CommittedWatch(bootstrap) if exactly_once else OffsetWatch(bootstrap)

    def total(self) -> int:
        return sum(sum(self.watch.get(t, len(w))) for t, w in self.targets.items())

    def run(
        self, timeout: float, time_box: float | None, on_first: Callable[[], None]
    ) -> tuple[float, int, float, int, bool]:
        """(first arrival time, records then, last sample time, records then, complete)."""
        deadline = time.monotonic() + timeout
        first: tuple[float, int] | None = None
        try:
            while True:
                total, now = self.total(), time.monotonic()
                if first is None and total:
                    first = (now, total)
                    on_first()
                    if time_box is not None:
                        deadline = min(deadline, now + time_box)
                if total >= self.wanted or now >= deadline:
                    start = first or (now, total)
                    return start[0], start[1], now, total, total >= self.wanted
                time.sleep(0.05)
        finally:
            self.watch.close()


def _live_stream(
    scenario: Scenario, source: str, target: str, remote: str, join: Callable[[], None] | None = None
) -> LiveResult:
    workload = scenario.live
    assert workload is not None
    result = LiveResult(scenario.live_rate, scenario.live_seconds)
    count = int(scenario.live_rate * scenario.live_seconds)
    records = list(record_stream(workload, count=count, seed=11))
    probe = Consumer(
        {
            "bootstrap.servers": target,
            "group.id": "srm-bench-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",  # librdkafka's default: an exactly-once record arrives when committed
        }
    )
    probe.assign([TopicPartition(remote, p, 0) for p in range(workload.partitions)])
    done = threading.Event()

    def receive() -> None:
        samples = result.latencies_ms
        while not done.is_set() or len(samples) < count:
            first = probe.poll(0.05)
            if first is None:
                if done.is_set() and time.monotonic() > receive_deadline:
                    return
                continue
            now = time.time() * 1000
            batch = [first, *probe.consume(10_000, 0)]
            samples.extend(now - m.timestamp()[1] for m in batch if m.error() is None)

    receive_deadline = float("inf")
    receiver = threading.Thread(target=receive, name="latency-probe", daemon=True)
    receiver.start()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 1, "enable.idempotence": True})
    tick = 0.01
    per_tick = max(1, int(scenario.live_rate * tick))
    next_tick = started = time.monotonic()
    for i in range(0, count, per_tick):
        if join is not None and scenario.join_at_s is not None and time.monotonic() - started >= scenario.join_at_s:
            join()  # a node joins: its share of the partitions moves to it
            join = None
        for partition, key, value, headers in records[i : i + per_tick]:
            producer.produce(workload.topic, value, key, partition=partition, headers=headers)
        producer.poll(0)
        next_tick += tick
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    producer.flush(30)
    result.records = count
    receive_deadline = time.monotonic() + 60
    done.set()
    receiver.join(65)
    probe.close()
    return result


def run_scenario(
    scenario: Scenario, bootstraps: tuple[str, str], workdir: Path, brokers: tuple[int, ...] = ()
) -> tuple[PathResult, LiveResult | None, dict[str, Any]]:
    """Backlog throughput (records/s after the first batch landed), the live stream's latency, and facts of the run
    (peak RSS, CPU seconds, retried batches). With the ``brokers``' pids, the backlog's CPU of the whole system too
    (the replicator's processes and both clusters' brokers): what the replicator's requests cost the brokers counts."""
    source, target = bootstraps
    workdir.mkdir(parents=True, exist_ok=True)
    topics = [w.topic for w in scenario.backlog] + ([scenario.live.topic] if scenario.live else [])
    targets = {f"{scenario.source}.{w.topic}": end_offsets(source, w.topic, w.partitions) for w in scenario.backlog}
    run: Replicator | SrmNodes
    if scenario.replicator == "mm2":
        config = workdir / "mm2.properties"
        config.write_text(mm2_properties(scenario.source, scenario.target, bootstraps, topics, scenario.exactly_once))
        run = Mm2Run(config, workdir, scenario.cpus)
    else:
        config = workdir / "srm.yaml"
        config.write_text(yaml.safe_dump(_config(scenario, bootstraps, topics), sort_keys=False))
        run = (
            SrmNodes(config, workdir, scenario.nodes, scenario.cpus)
            if scenario.nodes > 1 or scenario.join_at_s
            else SrmRun(config, workdir, scenario.cpus, scenario.workers)
        )
    facts: dict[str, Any] = {}
    live: LiveResult | None = None
    try:
        started = time.monotonic()
        progress = _Progress(target, targets, scenario.exactly_once)
        cpu_before: dict[int, float] = {}

        brokers_before: dict[int, float] = {}

        def sample_cpu() -> None:
            cpu_before.update({pid: process_cpu_seconds(pid) for pid in run.pids()})
            brokers_before.update({pid: process_cpu_seconds(pid) for pid in brokers})

        first, at_first, last, at_last, complete = progress.run(900, scenario.time_box_s, sample_cpu)
        facts["first_record_s"] = round(first - started, 2)  # start-up: the process started → a record replicated
        cpu_after = {pid: process_cpu_seconds(pid) for pid in run.pids()}
        brokers_cpu = sum(process_cpu_seconds(pid) - brokers_before.get(pid, 0.0) for pid in brokers)
        # where the CPU went while the backlog was replicated (srm run: the worker, the metrics aggregation, …)
        used = {pid: cpu_after[pid] - cpu_before.get(pid, 0.0) for pid in cpu_after}
        facts["cpu_s"] = {f"{process_label(pid)}-{pid}": round(seconds, 2) for pid, seconds in used.items()}
        if run.process.poll() is not None:
            raise RuntimeError(f"{scenario.replicator} exited with {run.process.returncode}:\n{run.output()[-3000:]}")
        per_record = sum(w.record_bytes * w.records for w in scenario.backlog) / max(1, progress.wanted)
        backlog = PathResult(
            records=at_last - at_first,
            bytes=int((at_last - at_first) * per_record),
            wall_s=last - first,
            cpu_s=sum(cpu_after.get(p, 0.0) - cpu_before.get(p, 0.0) for p in cpu_after),
            extra={
                "complete": complete,
                "replicated": at_last,
                "of": progress.wanted,
                "seconds_including_start": round(last - started, 2),
                **({"brokers_cpu_s": round(brokers_cpu, 2)} if brokers else {}),
            },
        )
        if scenario.live is not None:
            join = run.add if isinstance(run, SrmNodes) else None
            live = _live_stream(scenario, source, target, f"{scenario.source}.{scenario.live.topic}", join)
        pids = run.pids()
        main = "mm2" if scenario.replicator == "mm2" else "supervisor"
        facts["peak_rss_mb"] = {main: round(peak_rss_mb(pids[0]), 1)} | {
            f"{process_label(pid)}-{pid}": round(peak_rss_mb(pid), 1) for pid in pids[1:]
        }
    finally:
        run.stop()
    output = run.output()
    facts["retried_batches"] = output.count("batch failed, retrying")
    # MirrorMaker 2 logs its failures as ERROR lines (an interrupted sleep at shutdown is not one)
    facts["tracebacks"] = output.count(" ERROR ") if scenario.replicator == "mm2" else output.count("Traceback")
    if scenario.exactly_once:
        # what a read_committed consumer finds on the target: every record once, and the writer's commit markers
        facts["read_committed"] = {}
        for remote, want in targets.items():
            census = committed_census(target, remote, len(want))
            census["duplicates"] = census["records"] - census["distinct"]
            census["lost"] = sum(want) - census.pop("distinct")
            facts["read_committed"][remote] = census
    return backlog, live, facts
