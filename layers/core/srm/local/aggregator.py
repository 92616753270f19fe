"""The local runtime's metrics aggregation: ``python -m srm.local.aggregator``, a process of its own started by
``srm run`` (unless ``--no-metrics``), running the Glue job's work (:func:`srm.metrics.runner.run_once`) every
``metrics.aggregation.interval.seconds`` over the raw files the workers write, into the aggregated metrics (the
topic beside the state, or with ``srm run --endpoint-url`` the metrics table: :mod:`srm.app.stores`).

With the state in Kafka, the workers of every node send their raw records to one topic (``SRM_METRICS_TOPIC`` on
``SRM_STORE_CLUSTER``), and the aggregation runs on one node: every node's aggregator is a member of the group
``srm-leader.<group id>.metrics``, and the one that leads reads the topic, from its start, into its raw files
(:class:`srm.kafka.raw_metrics.RawDownload`) and aggregates them; the others wait, without a JVM.

One SparkSession lives as long as the process, so the JVM starts once, mapping the driver's class-data archive when
``make install`` wrote one (``python -m srm.local.aggregator archive``: the classes an aggregation loads, a start of
a third of the CPU). It is bounded: ``local[1]`` (one core of the machine's, the workers keep the rest), driver
memory ``SRM_SPARK_DRIVER_MEMORY`` (default 512m: a run reads only what arrived since the last, line by line), no
UI. Environment: ``SRM_METRICS_DIR`` (raw files under ``raw/``, the manifest and partials beside them),
``SRM_METRICS_INTERVAL_SECONDS``, and where the stores are (:mod:`srm.app.environment`).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from srm.app.environment import Environment
from srm.app.stores import Stores
from srm.aws.secrets import secrets_manager_resolver
from srm.local.kafka import install_root
from srm.local.threads import stop_without_supervisor
from srm.metrics.model.store import MetricsStore

__all__ = ["aggregate_once", "archive_classes", "class_archive", "main", "spark_session"]

log = logging.getLogger("srm.aggregator")


def class_archive() -> Path:
    """Where the Spark driver's class-data archive of the installed pyspark lives (beside Kafka's jars)."""
    from pyspark import __version__

    return install_root().parent / "spark" / __version__ / "driver-classes.jsa"


def spark_session(
    driver_memory: str = "512m", *, cores: int = 1, app_name: str = "srm-metrics", archive_to: Path | None = None
) -> Any:
    """A local SparkSession bound to loopback: nothing outside this machine needs to reach its driver. Its JVM maps
    the class-data archive when there is one (it checks the archive against its build and the jars, and starts
    without it if they differ), or with ``archive_to`` writes one as it exits."""
    # Read by the JVM pyspark launches: without it Spark looks up the host's address and warns when that is loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    archive = class_archive()
    if archive_to is not None:
        java = f"-XX:ArchiveClassesAtExit={archive_to} -Xlog:cds=off -Xlog:cds+dynamic=off"
    else:
        java = f"-XX:SharedArchiveFile={archive}" if archive.exists() else ""
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.driver.extraJavaOptions", java)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        # Small inputs, new plans every run: compiling whole-stage code costs more than it saves.
        .config("spark.sql.codegen.wholeStage", "false")
        # Every run plans the same queries again: keep their compiled classes. A run compiles some 200, over the 100
        # Spark keeps, so each run compiled them all again (a fifth of a small run's JVM time).
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        # The status store keeps every job's and query's plan (1,000 queries by default) even without the UI: in a
        # session kept for a node's whole life that grows with every run until the heap is spent.
        .config("spark.sql.ui.retainedExecutions", "10")
        .config("spark.ui.retainedJobs", "20")
        .config("spark.ui.retainedStages", "40")
        .config("spark.ui.retainedTasks", "1000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def aggregate_once(spark: Any, metrics_dir: Path, table: MetricsStore) -> Any:
    """One incremental run over ``<metrics_dir>/raw`` (see :mod:`srm.metrics.runner`)."""
    from srm.metrics.runner import LocalRawStore, run_once

    store = LocalRawStore(metrics_dir / "raw", metrics_dir / "manifest.json")
    return run_once(spark, store, table, settle_ms=5_000)


def archive_classes() -> Path:
    """Write the driver's class-data archive (unless there): a process of its own runs an aggregation, and its JVM
    dumps the classes it loaded as it exits."""
    archive = class_archive()
    if archive.exists():
        return archive
    partial = archive.with_name(archive.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "srm.local.aggregator", "archive-run", str(partial)], check=True)
    if not partial.exists():
        raise RuntimeError(f"the Spark driver wrote no class-data archive to {partial}")
    partial.rename(archive)
    return archive


def _archive_run(partial: Path) -> None:
    """An aggregation over one line (a bad one: the plan runs whole, over no record) in a JVM archiving its classes."""
    from pyspark import SparkContext

    from srm.metrics.aggregate import aggregate, check_lines, read_lines, records_of

    spark = spark_session(archive_to=partial)
    with tempfile.TemporaryDirectory(prefix="srm-archive-") as work:
        raw = Path(work) / "raw.jsonl"
        raw.write_text("{}\n")
        aggregate(records_of(check_lines(read_lines(spark, [str(raw)])))).collect()
    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    spark.stop()
    jvm.stdin.close()  # the gateway exits when its stdin closes; the archive is written as the JVM exits
    jvm.wait(120)


def main() -> int:
    if sys.argv[1:2] == ["archive"]:  # make install
        print(f"Spark driver class-data archive {archive_classes()}")
        return 0
    if sys.argv[1:2] == ["archive-run"]:
        _archive_run(Path(sys.argv[2]))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "botocore"):  # botocore: "Found credentials …", "Found endpoint …" at every start
        logging.getLogger(noisy).setLevel(logging.WARNING)
    metrics_dir = Path(os.environ["SRM_METRICS_DIR"])
    interval = float(os.environ.get("SRM_METRICS_INTERVAL_SECONDS", "60"))
    env = Environment.from_env()
    stores = Stores(env, secrets_manager_resolver(env.region, env.secrets_cache_seconds))
    table = stores.metrics
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop_without_supervisor(stop)
    topic, alias = env.metrics_topic, env.store_cluster
    elected = _Elected(stores, topic, alias, metrics_dir) if topic and alias else None
    spark = None
    try:
        while not stop.wait(interval):
            if elected is not None and not elected.ready():
                continue
            spark = spark or spark_session(os.environ.get("SRM_SPARK_DRIVER_MEMORY", "512m"))
            try:
                report = aggregate_once(spark, metrics_dir, table)
            except Exception as e:  # the next run tries again; the manifest is saved only after a good run
                log.error("metrics aggregation failed: %s", e)
                continue
            if report.files_changed:
                log.info("metrics aggregated: %s", report)
    finally:
        if elected is not None:
            elected.close()
        if spark is not None:
            spark.stop()
        stores.close()
    return 0


class _Elected:
    """The aggregation of an srm run cluster: only while this node leads it, over the raw records of all nodes."""

    def __init__(self, stores: Stores, topic: str, alias: str, metrics_dir: Path) -> None:
        from srm.kafka.clients import consumer_config
        from srm.local.leadership import Leadership

        config = stores.config.load(fresh=True)
        nodes = config.nodes()
        self.consumer = consumer_config(config, alias, None, group_id="srm-metrics-download")
        self.topic = topic
        self.metrics_dir = metrics_dir
        self.leadership = Leadership(
            consumer_config(config, alias, None, group_id="srm-leader"),
            topic,
            f"srm-leader.{nodes.group_id}.metrics",
            session_timeout_ms=nodes.session_timeout_ms,
            name="metrics aggregation",
        )
        self.leadership.start()
        self.download: Any = None

    def ready(self) -> bool:
        """Whether to aggregate now: this node leads, and the topic's new records are in the raw files."""
        from srm.kafka.raw_metrics import RawDownload

        if not self.leadership.is_leader:
            if self.download is not None:
                self.download.close()
                self.download = None
            return False
        if self.download is None:  # a new leader starts from every record the topic keeps
            shutil.rmtree(self.metrics_dir / "raw", ignore_errors=True)
            (self.metrics_dir / "manifest.json").unlink(missing_ok=True)
            self.download = RawDownload(self.consumer, self.topic, self.metrics_dir / "raw")
        try:
            self.download.read()
        except Exception as e:  # the records stay in the topic: the next interval reads them
            log.error("raw metrics not read from %s: %s", self.topic, e)
            return False
        return True

    def close(self) -> None:
        if self.download is not None:
            self.download.close()
        self.leadership.stop()


if __name__ == "__main__":
    sys.exit(main())
