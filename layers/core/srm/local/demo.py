"""``srm demo``: two local clusters, one flow, a backlog and live traffic, through the very handlers Lambda runs.

It prints what happened — topics on each side, records per partition on each side and whether they are equal,
throughput and replication latency — then runs one metrics aggregation (the Glue job's work, on a local Spark) and
prints per-topic throughput, latency and lag from the metrics table, checked against the records the demo counted;
then stops everything. Exit status 0 only if every partition is identical and the metrics table agrees.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.local.api_client import ApiError, MetricsApiClient
from srm.local.api_server import api_url
from srm.local.clusters import LocalCluster
from srm.local.demo_chart import write_chart
from srm.local.kafka import kafka_version
from srm.local.runtime import LocalRuntime, RuntimeOptions

__all__ = ["run_demo"]

TOPICS = {"orders": 3, "payments": 2, "inventory": 1}
SOURCE, TARGET = "us-west", "us-east"


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})


def _produce(bootstrap: str, topic: str, partitions: int, start: int, count: int, live: Producer | None = None) -> None:
    """``count`` records to ``topic`` from record ``start`` on, acknowledged before it returns; ``live``: the
    producer of the live traffic, kept for all of it as an application keeps one (a new idempotent producer each
    time would add its start — connections, a producer id — to every record's latency)."""
    producer = live or _producer(bootstrap)
    for i in range(start, start + count):
        producer.produce(
            topic,
            value=f"{topic} event {i} ".encode() * 4,
            key=f"customer-{i % 97}".encode(),
            partition=i % partitions,
            headers=[("source", b"demo"), ("seq", str(i).encode())],
        )
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(60)


def _read(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "srm-demo-reader", "enable.auto.commit": False})
    out: dict[int, list[tuple]] = {}
    try:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            rows: list[tuple] = []
            if high > low:
                consumer.assign([TopicPartition(topic, p, low)])
                while not rows or consumer.position([tp])[0].offset < high:
                    batch = consumer.consume(2000, timeout=1.0)
                    if not batch and consumer.position([tp])[0].offset >= high:
                        break
                    rows += [
                        (m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]) for m in batch if not m.error()
                    ]
            out[p] = rows
    finally:
        consumer.close()
    return out


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "srm-demo-wm"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


class _LatencyProbe:
    """Consumes the remote topics and records (seconds since ``t0``, now − record timestamp) for the live records."""

    def __init__(self, bootstrap: str, topics: list[str], since_ms: int, t0: float) -> None:
        self.samples: list[tuple[float, int]] = []
        self._since = since_ms
        self._t0 = t0
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "srm-demo-latency",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe(topics)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = int(time.time() * 1000)
            at = time.monotonic() - self._t0
            for m in self._consumer.consume(1000, timeout=0.02):
                if not m.error() and m.timestamp()[1] >= self._since:
                    self.samples.append((at, now - m.timestamp()[1]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


class _ReplicatedSampler:
    """Samples (seconds since ``t0``, records on the target's remote topics) twice a second: the chart's throughput."""

    def __init__(self, bootstrap: str, t0: float) -> None:
        self.samples: list[tuple[float, int]] = []
        self._bootstrap, self._t0 = bootstrap, t0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "srm-demo-sampler"})
        try:
            while not self._stop.wait(0.5):
                total = 0
                for topic, partitions in TOPICS.items():
                    for p in range(partitions):
                        # not created yet by topic sync: nothing replicated there
                        with contextlib.suppress(Exception):
                            total += consumer.get_watermark_offsets(
                                TopicPartition(f"{SOURCE}.{topic}", p), timeout=5, cached=False
                            )[1]
                self.samples.append((time.monotonic() - self._t0, total))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _config(source: str, target: str) -> SrmConfig:
    props = Properties.of(
        {
            "clusters": f"{SOURCE}, {TARGET}",
            f"{SOURCE}.bootstrap.servers": source,
            f"{TARGET}.bootstrap.servers": target,
            f"{SOURCE}->{TARGET}.enabled": "true",
            f"{SOURCE}->{TARGET}.topics": "orders, payments, inventory",
            f"{SOURCE}->{TARGET}.groups": "billing",
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.interval.seconds": "1",
            "replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",  # and the state's topics: one broker
            "refresh.topics.interval.seconds": "2",
        },
        source="srm demo",
    )
    return SrmConfig.from_properties(props)


def _wait_caught_up(source: str, target: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = True
        for topic, partitions in TOPICS.items():
            want = _end_offsets(source, topic, partitions)
            try:
                have = _end_offsets(target, f"{SOURCE}.{topic}", partitions)
            except Exception:
                done = False
                break
            if any(h < w for h, w in zip(have, want, strict=True)):
                done = False
                break
        if done:
            return True
        time.sleep(0.25)
    return False


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # gone before the clusters stop: no disconnect noise
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
        f.result(30)


def run_demo(records: int = 30_000, keep_data: bool = False, chart: Path = Path("srm-demo.png")) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="srm-demo-"))
    west = LocalCluster(SOURCE, workdir / SOURCE / "data")
    east = LocalCluster(TARGET, workdir / TARGET / "data")
    runtime: LocalRuntime | None = None
    try:
        print(f"starting two local Apache Kafka {kafka_version()} clusters (KRaft) in {workdir}")
        west.start()
        east.start()
        print(f"  {SOURCE}: {west.bootstrap}\n  {TARGET}: {east.bootstrap}")
        _create_topics(west.bootstrap)
        t0 = time.monotonic()
        for topic, partitions in TOPICS.items():
            _produce(west.bootstrap, topic, partitions, 0, records)
        backlog = records * len(TOPICS)
        print(f"produced a backlog of {backlog:,} records on {SOURCE} in {time.monotonic() - t0:.1f}s")

        print(f"replicating {SOURCE}->{TARGET} through the mirror handler (local event source mappings)...")
        runtime = LocalRuntime(  # its state in Kafka, on us-east (the flow's target), as srm run keeps it
            _config(west.bootstrap, east.bootstrap),
            RuntimeOptions(state_dir=workdir / ".srm-local", aggregation=False),
        )
        started = time.monotonic()
        started_ms = int(time.time() * 1000)
        sampler = _ReplicatedSampler(east.bootstrap, started)
        sampler.start()
        runtime.start()
        if not _wait_caught_up(west.bootstrap, east.bootstrap, timeout=300):
            print("the backlog did not replicate within 300s")
            return 1
        backlog_seconds = time.monotonic() - started

        since = int(time.time() * 1000)
        probe = _LatencyProbe(east.bootstrap, [f"{SOURCE}.{t}" for t in TOPICS], since, started)
        probe.start()
        time.sleep(1.0)
        live = 0
        live_until = time.monotonic() + 5.0
        live_producer = _producer(west.bootstrap)
        while time.monotonic() < live_until:
            for topic, partitions in TOPICS.items():
                _produce(west.bootstrap, topic, partitions, records + live, 200, live_producer)
            live += 200
            time.sleep(0.1)
        del live_producer  # flushed: gone before the clusters stop, which it would log as lost connections
        caught_up = _wait_caught_up(west.bootstrap, east.bootstrap, timeout=120)
        time.sleep(0.5)
        probe.stop()
        sampler.stop()
        live_from = since / 1000 - started_ms / 1000
        failover = _failover(west.bootstrap, east.bootstrap)
        time.sleep(2.0)  # a lag sample after the catch-up (the checkpoint function samples every second here)
        counted = {topic: records + live for topic in TOPICS}
        metrics = _metrics_report(runtime, since_ms=started_ms, counted=counted)
        runtime.stop()  # quiet before the report
        runtime = None
        print(failover)
        latencies = [ms for _, ms in probe.samples]
        status = _report(west, east, backlog, backlog_seconds, live * len(TOPICS), latencies, caught_up)
        print(metrics.text)
        written = write_chart(chart.resolve(), sampler.samples, probe.samples, live_from)
        print(f"\nchart of throughput and latency over the run: {written}")
        ok = failover.startswith("consumer group failover: ok") and metrics.agrees
        return status or (0 if ok else 1)
    finally:
        if runtime is not None:
            runtime.stop()
        west.stop()
        east.stop()
        if not keep_data:
            shutil.rmtree(workdir, ignore_errors=True)


def _failover(source: str, target: str) -> str:
    """A consumer group reads part of ``orders`` on the source, fails over, and must read exactly the rest."""
    group, topic = "billing", "orders"
    partitions = TOPICS[topic]
    consumer = Consumer(
        {"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    before: list[bytes | None] = []
    consumer.subscribe([topic])
    while len(before) < 5_000:
        before += [m.value() for m in consumer.consume(500, timeout=1.0) if m.error() is None]
    consumer.commit(asynchronous=False)
    committed = {tp.partition for tp in consumer.committed(consumer.assignment(), timeout=10) if tp.offset >= 0}
    consumer.close()
    remote = f"{SOURCE}.{topic}"
    deadline = time.monotonic() + 60  # the checkpoint function commits the translated offsets to the idle group
    admin = AdminClient({"bootstrap.servers": target})
    while time.monotonic() < deadline:
        found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
        if {tp.partition for tp in found.topic_partitions if tp.topic == remote and tp.offset >= 0} >= committed:
            break
        time.sleep(0.5)
    else:
        return "consumer group failover: FAILED (no translated offsets on the target within 60s)"
    consumer = Consumer(
        {"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([remote])
    after: list[bytes | None] = []
    total = sum(len(rows) for rows in _read(source, topic, partitions).values())
    idle_until = time.monotonic() + 5
    while time.monotonic() < idle_until:
        batch = [m.value() for m in consumer.consume(500, timeout=0.5) if m.error() is None]
        after += batch
        if batch:
            idle_until = time.monotonic() + 2
    consumer.close()
    duplicates = len(set(before) & set(after)) + len(after) - len(set(after))
    skipped = total - len(set(before) | set(after))
    verdict = "ok" if duplicates == 0 and skipped == 0 else "FAILED"
    return (
        f"consumer group failover: {verdict} — '{group}' read {len(before):,} records of {topic} on {SOURCE}, "
        f"then {len(after):,} on {TARGET}: {duplicates} duplicates, {skipped} skipped"
    )


def _report(
    west: LocalCluster,
    east: LocalCluster,
    backlog: int,
    backlog_seconds: float,
    live: int,
    latencies: list[int],
    caught_up: bool,
) -> int:
    print()
    print(f"topics on {SOURCE}: {', '.join(sorted(t for t in _topics(west.bootstrap) if not t.startswith('__')))}")
    print(f"topics on {TARGET}: {', '.join(sorted(t for t in _topics(east.bootstrap) if not t.startswith('__')))}")
    print()
    print(f"{'partition':<36}{SOURCE:>12}{TARGET:>12}   identical")
    all_equal = caught_up
    for topic, partitions in TOPICS.items():
        src = _read(west.bootstrap, topic, partitions)
        dst = _read(east.bootstrap, f"{SOURCE}.{topic}", partitions)
        for p in range(partitions):
            equal = src[p] == dst.get(p)
            all_equal &= equal
            label = f"{topic}-{p} -> {SOURCE}.{topic}-{p}"
            print(f"{label:<36}{len(src[p]):>12,}{len(dst.get(p, [])):>12,}   {'yes' if equal else 'NO'}")
    print()
    print(
        f"backlog: {backlog:,} records replicated in {backlog_seconds:.1f}s "
        f"({backlog / backlog_seconds:,.0f} records/s, including start-up)"
    )
    if latencies:
        ordered = sorted(latencies)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(
            f"live traffic: {live:,} records; replication latency p50 {statistics.median(ordered):.0f} ms, "
            f"p99 {p99} ms, max {ordered[-1]} ms"
        )
    print(f"result: {'every partition identical (0 lost, 0 duplicated)' if all_equal else 'DIFFERENCES FOUND'}")
    return 0 if all_equal else 1


class _MetricsReport(NamedTuple):
    text: str
    agrees: bool


def _download_raw_metrics(runtime: LocalRuntime) -> None:
    """The workers send their raw metric records to the metrics topic beside the state: into the raw files the
    aggregation reads, as the aggregation's leader of an ``srm run`` cluster does (:mod:`srm.local.aggregator`)."""
    from srm.kafka.clients import consumer_config
    from srm.kafka.raw_metrics import RawDownload

    env = runtime.worker_env("", "")
    alias, topic = env["SRM_STORE_CLUSTER"], env["SRM_METRICS_TOPIC"]
    conf = consumer_config(runtime.config, alias, None, group_id="srm-metrics-download")
    download = RawDownload(conf, topic, runtime.metrics_dir / "raw")
    try:
        download.read()  # to the topic's end now (the workers go on sending: heartbeats, checkpoints)
    finally:
        download.close()


def _metrics_report(runtime: LocalRuntime, since_ms: int, counted: dict[str, int]) -> _MetricsReport:
    """One aggregation of the raw metrics the functions wrote, then per topic from the metrics API (as ``srm
    metrics`` and the web view read it): records (checked against ``counted``), throughput, latency p50/p99 and the
    lag at the end."""
    from srm.local.aggregator import aggregate_once, spark_session

    t0 = time.monotonic()
    _download_raw_metrics(runtime)
    spark = spark_session()
    try:
        with runtime.metrics_store() as table:
            report = aggregate_once(spark, runtime.metrics_dir, table)
    finally:
        spark.stop()
    url = api_url(runtime.options.state_dir)
    lines = [
        "",
        f"metrics ({report.files_read} raw files, {report.rows_written} rows written by one aggregation in "
        f"{time.monotonic() - t0:.1f}s, Spark start included), from the metrics API at {url}:",
        f"{'topic':<12}{'records':>10}{'counted':>10}{'rec/s, busiest min':>20}{'latency p50':>13}{'p99':>10}"
        f"{'lag':>6}",
    ]
    if url is None:
        return _MetricsReport("\n".join([*lines, "metrics: the API did not start (no .srm-local/api.url)"]), False)
    api = MetricsApiClient(url)
    agrees = True
    window = {"from": since_ms - 60_000, "to": int(time.time() * 1000) + 60_000}
    try:
        for topic in TOPICS:
            path = f"/v2/topic-metrics/{SOURCE}/{TARGET}/{topic}"
            minutes = api.get(f"{path}/record-count", **window)["points"]
            rates = api.get(f"{path}/record-rate", **window)["points"]
            hours = api.get(f"{path}/replication-latency-ms", resolution="1h", **{"from": since_ms - 3_600_000})
            lags = api.get(f"{path}/replication-records-lag", **window)["points"]
            total = sum(p["value"] for p in minutes)
            busiest_minute = max((p["value"] for p in rates), default=0)  # a minute's average rate
            busiest: dict[str, Any] = max(hours["points"], key=lambda p: p["count"] or 0, default={})
            agrees &= total == counted[topic]
            lag = f"{lags[-1]['value']:.0f}" if lags else "-"
            lines.append(
                f"{topic:<12}{total:>10,.0f}{counted[topic]:>10,}{busiest_minute:>20,.0f}"
                f"{busiest.get('p50') or 0:>10,.0f} ms{busiest.get('p99') or 0:>7,.0f} ms"
                f"{lag:>6}"
            )
    except ApiError as e:
        return _MetricsReport("\n".join([*lines, f"metrics: {e}"]), False)
    lines.append(
        "metrics: the API's record counts equal the records the demo produced, per topic"
        if agrees
        else "metrics: the API's record counts DIFFER from the records the demo produced"
    )
    return _MetricsReport("\n".join(lines), agrees)


def _topics(bootstrap: str) -> list[str]:
    return list(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
