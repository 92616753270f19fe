"""``python -m bench.metrics_api [--requests N]``: the local metrics API's latency, as ``srm run`` serves it.

The store is the one ``srm run`` starts (the DynamoDB emulation over a compacted topic, ``srm.local.store``, on a
local Kafka cluster) holding two hours of minute windows for one flow and each of its 10 topics of 3 partitions (as
the aggregation writes them), and the flow's state in a state topic beside it, as ``srm run`` keeps them; the API is its
own process (``srm.local.api_server``, the Lambda handler behind HTTP). N requests over one keep-alive connection
cycle through the routes a dashboard reads: the flow list, a flow's topics, a 2-hour flow series and a 2-hour topic
latency series. Prints p50/p99/max per route and overall.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
import requests

TOPICS = [f"topic-{i}" for i in range(10)]
LATENCY = {"count": 500, "min": 3, "max": 240, "avg": 41.5, "p50": 30, "p95": 120, "p99": 200}


def _fill(endpoint: str, bootstrap: str, state_topic: str, now_ms: int) -> None:
    from srm.aws.config_table import ConfigStore, create_config_table
    from srm.aws.metrics_table import MetricsTable, create_metrics_table
    from srm.aws.state import create_state_table
    from srm.config.parsing import Properties
    from srm.config.settings import SrmConfig
    from srm.kafka.state import KafkaState
    from srm.metrics.model.series import MetricPoint, Series
    from srm.state import TopicMappingRecord

    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    create_config_table(db, "srm-config")
    create_state_table(db, "srm-state")  # the nodes' items (srm run creates it too)
    create_metrics_table(db, "srm-metrics")
    props = {
        "clusters": "a, b",
        "a.bootstrap.servers": "a:9092",
        "b.bootstrap.servers": bootstrap,  # the state's cluster
        "a->b.enabled": "true",
    }
    ConfigStore(db, "srm-config").replace_all(SrmConfig.from_properties(Properties.of(props)))
    conf = {"bootstrap.servers": bootstrap}
    state = KafkaState(state_topic, conf, dict(conf)).start(60)
    try:
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
    MetricsTable(db, "srm-metrics").write(points)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_api", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    from confluent_kafka.admin import AdminClient

    from srm.kafka.admin import ensure_topic
    from srm.local.clusters import LocalCluster
    from srm.local.store import KafkaStoreSpec, LocalStore, free_port

    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-api-"))
    cluster = LocalCluster("b", workdir / "kafka" / "data")
    cluster.start()
    conf, topic, state_topic = {"bootstrap.servers": cluster.bootstrap}, "srm-store.bench.internal", "srm-state.bench"
    store = LocalStore(KafkaStoreSpec("b", topic, conf, dict(conf)), state_dir=workdir / ".srm-local")
    api: subprocess.Popen[bytes] | None = None
    try:
        for name in (topic, state_topic):
            ensure_topic(AdminClient(conf), name, 1, 1, {"cleanup.policy": "compact"})
        endpoint = store.start()
        store.wait_ready(60)
        now = int(time.time() * 1000)
        _fill(endpoint, cluster.bootstrap, state_topic, now)
        port = free_port()
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "SRM_CONFIG_CACHE_SECONDS": "2",
            "SRM_API_PORT": str(port),
            "SRM_API_STATE_DIR": str(workdir / ".srm-local"),
            "SRM_STORE_CLUSTER": "b",
            "SRM_STATE_TOPIC": state_topic,
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
        print(f"metrics API on srm run's store, {args.requests} requests over one connection (ms):")
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
        store.stop()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
