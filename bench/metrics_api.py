"""``python -m bench.metrics_api [--requests N]``: the local metrics API's latency, as ``srm run`` serves it.

The stores are the ones ``srm run`` keeps on its store cluster (here one local Kafka cluster): the state topic holding
the configuration (``srm.kafka.config_store``), the flow's topic mappings and status facts (``srm.kafka.state``), and
the aggregated metrics' topic (``srm.kafka.metrics_store``) holding two hours of minute windows for one flow and each
of its 10 topics of 3 partitions (as the aggregation writes them). The API is its own process
(``srm.local.api_server``, the Lambda handler behind HTTP) given the environment ``srm run`` gives it
(``SRM_STORE_CLUSTER``, ``SRM_STORE_PROPERTIES``, ``SRM_STATE_TOPIC``, ``SRM_METRICS_STORE_TOPIC``): it reads both
topics into memory itself. N requests over one keep-alive connection cycle through the routes a dashboard reads: the
flow list, a flow's topics, a 2-hour flow series and a 2-hour topic latency series. Prints p50/p99/max per route and
overall.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

TOPICS = [f"topic-{i}" for i in range(10)]
LATENCY = {"count": 500, "min": 3, "max": 240, "avg": 41.5, "p50": 30, "p95": 120, "p99": 200}
STORE = "b"  # the store cluster: the flow's target, as srm run picks it by default


def _properties(bootstrap: str) -> dict[str, str]:
    return {
        "clusters": "a, b",
        "a.bootstrap.servers": "a:9092",
        "b.bootstrap.servers": bootstrap,  # the store cluster
        "a->b.enabled": "true",
    }


def _store_properties(props: dict[str, str]) -> dict[str, str]:
    """``SRM_STORE_PROPERTIES`` as ``srm run`` writes it: the global properties and the store cluster's."""
    from srm.config.scopes import split_scopes

    scopes = split_scopes(props, ("a", "b"))
    own = scopes.get(f"cluster#{STORE}", {})
    return {**scopes.get("global", {}), **{f"{STORE}.{k}": v for k, v in own.items()}}


def _fill(props: dict[str, str], bootstrap: str, state_topic: str, metrics_topic: str, now_ms: int) -> None:
    from srm.config.parsing import Properties
    from srm.config.settings import SrmConfig
    from srm.kafka.config_store import KafkaConfig
    from srm.kafka.metrics_store import KafkaMetrics
    from srm.kafka.state import KafkaState
    from srm.metrics.model.series import MetricPoint, Series
    from srm.state import TopicMappingRecord

    conf = {"bootstrap.servers": bootstrap}
    state = KafkaState(state_topic, conf, dict(conf)).start(60)
    try:
        KafkaConfig(state).replace_all(SrmConfig.from_properties(Properties.of(props)))
        for topic in TOPICS:
            state.put_topic_mapping("a", "b", TopicMappingRecord(topic, f"a.{topic}", 3))
        facts = {"heartbeat_ms": now_ms, "heartbeat_replicated_ms": now_ms, "last_checkpoint_ms": now_ms}
        state.update_flow_status("a", "b", **facts)
    finally:
        state.stop()
    first = now_ms - now_ms % 60_000 - 120 * 60_000
    window = {"record-count": 6000, "byte-count": 600_000, "record-rate": 100.0, "replication-latency-ms": LATENCY}
    points = [
        MetricPoint(series, first + i * 60_000, {**window, "replication-records-lag": i % 7})
        for i in range(120)
        for series in [Series("1m", "flow", "a", "b"), *(Series("1m", "topic", "a", "b", t) for t in TOPICS)]
    ]
    metrics = KafkaMetrics(metrics_topic, conf, dict(conf)).start(60)
    try:
        metrics.write(points)
    finally:
        metrics.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_api", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    from confluent_kafka.admin import AdminClient

    from srm.config.parsing import Properties
    from srm.config.settings import SrmConfig
    from srm.kafka.admin import ensure_topic
    from srm.kafka.metrics_store import metrics_store_topic
    from srm.local.clusters import LocalCluster
    from srm.local.store import free_port

    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-api-"))
    cluster = LocalCluster(STORE, workdir / "kafka" / "data")
    cluster.start()
    props = _properties(cluster.bootstrap)
    nodes = SrmConfig.from_properties(Properties.of(props)).nodes()
    state_topic, metrics_topic = nodes.topic, metrics_store_topic(nodes.group_id)  # srm run's names
    api: subprocess.Popen[bytes] | None = None
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for name in (state_topic, metrics_topic):
            ensure_topic(admin, name, 1, 1, {"cleanup.policy": "compact"})
        now = int(time.time() * 1000)
        _fill(props, cluster.bootstrap, state_topic, metrics_topic, now)
        port = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"},
            "SRM_CONFIG_CACHE_SECONDS": "2",
            "SRM_API_PORT": str(port),
            "SRM_API_STATE_DIR": str(workdir / ".srm-local"),
            "SRM_STORE_CLUSTER": STORE,
            "SRM_STORE_PROPERTIES": json.dumps(_store_properties(props), sort_keys=True),
            "SRM_STATE_TOPIC": state_topic,
            "SRM_METRICS_STORE_TOPIC": metrics_topic,
        }
        api = subprocess.Popen([sys.executable, "-m", "srm.local.api_server"], env=env, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        session = requests.Session()
        deadline = time.monotonic() + 30
        while True:
            try:
                session.get(f"{base}/v2/replications", timeout=5).raise_for_status()
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        routes = {
            "/v2/replications": {},
            "/v2/replications/a/b/topics": {},
            "/v2/cluster-metrics/a/b/record-rate (2 h)": {},
            "/v2/topic-metrics/a/b/topic-3/replication-latency-ms (2 h)": {},
        }
        times: dict[str, list[float]] = {route: [] for route in routes}
        for _ in range(20):  # warm-up: imports, the config cache, connections
            session.get(f"{base}/v2/replications", timeout=10)
        for i in range(args.requests):
            route = list(routes)[i % len(routes)]
            t0 = time.perf_counter()
            answer = session.get(base + route.split(" ")[0], timeout=10)
            times[route].append((time.perf_counter() - t0) * 1000)
            answer.raise_for_status()
        every = sorted(t for ts in times.values() for t in ts)
        print(f"metrics API on srm run's store topics, {args.requests} requests over one connection (ms):")
        print(f"{'route':<62}{'p50':>8}{'p99':>8}{'max':>8}")
        for route, ts in [*times.items(), ("all", every)]:
            ordered = sorted(ts)
            p99 = ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)]
            print(f"{route:<62}{statistics.median(ordered):>8.1f}{p99:>8.1f}{ordered[-1]:>8.1f}")
        return 0
    finally:
        if api is not None:
            api.terminate()
            api.wait(10)
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
