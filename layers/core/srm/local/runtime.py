"""``srm run``: the local runtime's supervisor, one node of an ``srm run`` cluster.

It validates the configuration, opens the state the cluster's nodes share (:mod:`srm.local.store`: by default a
compacted topic on one of the clusters, else the DynamoDB of ``--endpoint-url``), claims the node's id there
(:mod:`srm.local.nodes`), stores the configuration there, and keeps one worker process per enabled flow — started
and stopped as flows are enabled and disabled in it (``srm-control``), restarted if one dies. The workers of a flow on
every node share its partitions through Kafka's group protocol and elect one leader for its scheduled functions
(:mod:`srm.local.worker`). SIGINT/SIGTERM stop everything within seconds; it resumes from the source offsets
committed so far, with the offset runs and checkpoints the state kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from srm.aws.config_table import DynamoDBConfig
from srm.aws.nodes import DynamoDBNodes
from srm.config.nodes import legacy_store_topic
from srm.config.parsing import Properties
from srm.config.scopes import split_scopes
from srm.config.secrets import default_secret_resolver, is_plain_secret
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError, ConfigStore
from srm.control.check import ClusterAnswer, answered_topics, check_distinct, probe_clusters
from srm.errors import PermanentError
from srm.flow import Flow
from srm.kafka.admin import KafkaAccessError, list_topics
from srm.kafka.clients import admin_config, build
from srm.kafka.config_store import KafkaConfig
from srm.kafka.metrics_store import KafkaMetrics
from srm.kafka.nodes import KafkaNodes
from srm.kafka.state import KafkaState
from srm.local.nodes import (
    NodeFiles,
    NodePresence,
    Noted,
    check_node_id,
    default_node_id,
    ensure_store_topics,
    kafka_store_spec,
)
from srm.local.state_upgrade import read_legacy_store, upgrade_store
from srm.local.store import (
    STATE_DIR,
    KafkaStoreSpec,
    StoreError,
    check_state_dir,
    free_port,
    known_store_cluster,
    lock_state_dir,
    note_store_cluster,
)
from srm.metrics.model.store import MetricsStore
from srm.state import StateError
from srm.state.nodes import Nodes

__all__ = ["FENCED_EXIT", "LocalRuntime", "NodeFencedError", "RuntimeOptions"]

log = logging.getLogger(__name__)

_STABLE_S = 10.0  # a worker that exits sooner after its start is restarted with a growing delay
_PROBE_S = 5.0  # how long the start waits for each cluster (side by side) before it warns and goes on
_RETRY_S = 5.0  # how often the start tries again to create the state's topics
_WARN_AGAIN_S = (5.0, 300.0)  # the state that cannot be read is said after 5 s, then 10, 20 … at most every 5 min
FENCED_EXIT = 75  # a worker's exit status once another node took over its node id


class _Stopped(Exception):
    """Stopped (SIGINT, SIGTERM) while starting."""


class NodeFencedError(PermanentError, RuntimeError):
    """Another node took over this node's id: this one stops."""


@dataclass
class RuntimeOptions:
    endpoint_url: str | None = None
    node_id: str | None = None  # default: derived from the host and the run directory
    config_table: str = "srm-config"
    state_table: str = "srm-state"
    region: str = "us-east-1"
    verbose: bool = False
    state_dir: Path = STATE_DIR
    config_cache_seconds: float = 2.0
    metrics: bool = True  # raw metrics from the workers and the aggregation process (srm run --no-metrics: off)
    metrics_table: str = "srm-metrics"
    aggregation: bool = True  # the aggregation process (the demo runs one aggregation itself instead)
    api_port: int | None = 0  # the metrics API on 127.0.0.1 (0: a free port; None: not served)
    workers: int = 1  # worker processes per enabled flow (members of the flow's groups beside each other)
    extra_env: dict[str, str] = field(default_factory=dict)


def _secrets_to_env(props: Properties) -> tuple[Properties, dict[str, str]]:
    """Literal secrets of a local config file travel to the workers by environment, never through the table."""
    clean = Properties(source=props.source)
    env: dict[str, str] = {}
    for key, value in props.items():
        if is_plain_secret(key, value):
            name = f"SRM_SECRET_{len(env)}"
            env[name] = value
            value = f"${{env:{name}}}"
        clean.set(key, value, props.origin(key))
    return clean, env


class LocalRuntime:
    def __init__(self, config: SrmConfig, options: RuntimeOptions | None = None) -> None:
        self.options = options or RuntimeOptions()
        clean, self._secret_env = _secrets_to_env(config.properties)
        self.config = SrmConfig.from_properties(clean)
        self._store: KafkaStoreSpec | None = None  # where the shared state is (None: --endpoint-url's DynamoDB)
        self._state: KafkaState | None = None  # this process's reader of it
        self._lock: IO[str] | None = None  # the state directory's, held while running
        self.endpoint_url = self.options.endpoint_url
        # a flow's worker processes by (flow, index): index 0 is the node's own member, the others its siblings
        self._workers: dict[tuple[Flow, int], subprocess.Popen[bytes]] = {}
        self._wanted: set[Flow] = set()  # the enabled flows, as of the last reconcile
        self._started: dict[tuple[Flow, int], float] = {}
        self._restarts: dict[tuple[Flow, int], float] = {}  # no restart before this time
        self._early_exits: dict[tuple[Flow, int], int] = {}  # exits in a row soon after starting
        self.config_store: ConfigStore | None = None
        self._aggregator: subprocess.Popen[bytes] | None = None
        self._api: subprocess.Popen[bytes] | None = None
        self.api_port: int | None = None
        self.node_id = check_node_id(self.options.node_id or default_node_id(self.options.state_dir))
        self.nodes = self.config.nodes()
        self.presence: NodePresence | None = None
        self.fenced: str | None = None  # set when a worker was fenced: the node stops
        self._answers: dict[str, ClusterAnswer] = {}  # the clusters as the start found them
        self._lifecycle = threading.Lock()  # start() (in its thread) makes what stop() undoes: one at a time

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self, stop: threading.Event | None = None) -> None:
        """Open the state, claim the node's id, load the config and start the workers; waits (until ``stop``)
        while the cluster holding the shared state does not answer. Raises :class:`_Stopped` once ``stop`` is set,
        at the next step: :func:`run` runs it in a thread of its own, so that no step delays a stop."""
        stop = stop or threading.Event()
        if self.endpoint_url is None:
            check_state_dir(self.options.state_dir)  # before anything is asked or created
        self._check_clusters()
        if self.endpoint_url is None:
            with self._unless(stop):
                self._lock = lock_state_dir(self.options.state_dir)
            spec = self._kafka_store()
            self._note_config_path()
            state = self._open_state(spec, stop)
            note_store_cluster(spec.alias, spec.state_topic, self.options.state_dir)
            self._upgrade(spec, state)
            config_store: ConfigStore = KafkaConfig(state, cache_seconds=0)
            nodes: Nodes = KafkaNodes(state, self.nodes.group_id)
            where = f"topic {spec.state_topic} on cluster {spec.alias}"
        else:
            dynamodb = self._dynamodb()
            config_store = DynamoDBConfig(dynamodb, self.options.config_table, cache_seconds=0)
            nodes = DynamoDBNodes(dynamodb, self.options.state_table, self.nodes.group_id)
            where = f"{self.endpoint_url} (table {self.options.config_table})"
        with self._unless(stop):
            files = NodeFiles(self.options.state_dir / "nodes", self.nodes.group_id)
            self.presence = NodePresence(Noted(nodes, files), self.node_id, self.options.state_dir.resolve().parent)
            self.presence.claim()
        log.info("node %s of cluster %s", self.node_id, self.nodes.group_id)
        self.config_store = config_store
        self._load_config()
        log.info("config loaded into %s", where)
        with self._unless(stop):  # the processes: none is started once stop() has run
            if self.options.metrics and self.options.aggregation:
                self._start_aggregator()
            if self.options.api_port is not None:
                self.api_port = self.options.api_port or free_port()  # kept across restarts of the API process
                self._start_api()
            self.reconcile()

    @contextlib.contextmanager
    def metrics_store(self) -> Iterator[MetricsStore]:
        """The aggregated metrics, for an aggregation run here (the demo's)."""
        if self._store is None:
            from srm.aws.metrics_table import MetricsTable

            yield MetricsTable(self._dynamodb(), self.options.metrics_table)
            return
        store = KafkaMetrics(self._store.metrics_store_topic or "", self._store.consumer, self._store.producer)
        try:
            yield store
        finally:
            store.stop()

    def _dynamodb(self) -> Any:
        """The DynamoDB of ``--endpoint-url``, its tables created if missing."""
        import boto3
        from botocore.exceptions import EndpointConnectionError

        from srm.aws.config_table import create_config_table
        from srm.aws.metrics_table import create_metrics_table
        from srm.aws.state import create_state_table

        dynamodb = boto3.client(
            "dynamodb",
            region_name=self.options.region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "local"),
            aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
        )
        try:
            create_config_table(dynamodb, self.options.config_table)
        except EndpointConnectionError as e:  # a DynamoDB that is not (yet) running there
            raise StoreError(f"--endpoint-url {self.endpoint_url}: no DynamoDB answers there ({e})") from None
        create_state_table(dynamodb, self.options.state_table)
        create_metrics_table(dynamodb, self.options.metrics_table)  # the API reads it, with or without metrics
        return dynamodb

    def _load_config(self) -> None:
        """Make the stored configuration this node's file; nodes starting together may race: the one that lost reads
        what the other wrote and tries again."""
        assert self.config_store is not None
        for attempt in range(5):
            try:
                self.config_store.replace_all(self.config, author="srm run")
                return
            except ConfigConflictError:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    @contextlib.contextmanager
    def _unless(self, stop: threading.Event) -> Iterator[None]:
        """A step of :meth:`start` that makes something :meth:`stop` must undo: not taken once ``stop`` is set, and
        never while :meth:`stop` runs (from another thread)."""
        with self._lifecycle:
            if stop.is_set():
                raise _Stopped()
            yield

    @property
    def metrics_dir(self) -> Path:
        return self.options.state_dir.resolve() / "metrics"

    def _kafka_store(self) -> KafkaStoreSpec:
        """The cluster and topics of the shared state, the topics created if missing (and if it answers)."""
        known = known_store_cluster(self.nodes.group_id, self.options.state_dir)
        topics_of = answered_topics(self.config, self._answers, _PROBE_S)  # where the state is: asked at the start
        spec = kafka_store_spec(
            self.config, self._resolve_secret, metrics=self.options.metrics, known=known, topics_of=topics_of
        )
        self._store = spec
        return spec

    def _note_config_path(self) -> None:
        """Where this run's config file is, for ``srm-control --local`` in this directory: it reaches the state
        with the file's settings (the stored configuration holds literal secrets only as references to the
        environment)."""
        source = Path(self.config.properties.source)  # a file, or a folder of connector definitions
        if source.exists():
            (self.options.state_dir / "config.path").write_text(f"{source.resolve()}\n")

    def _open_state(self, spec: KafkaStoreSpec, stop: threading.Event) -> KafkaState:
        """The state, once read; while it cannot be, says why ever less often (:data:`_WARN_AGAIN_S`) and creates
        its topics (every few seconds, said only with the warning) if they could not be."""
        started = time.monotonic()
        interval, cap = _WARN_AGAIN_S
        warn_at = started + interval
        created = False
        while True:
            if stop.is_set():
                raise _Stopped()
            state = KafkaState(spec.state_topic, spec.consumer, spec.producer)
            try:
                with self._unless(stop):
                    self._state = state
                state.start(writer=True)  # the node's presence and the configuration are written next
                break
            except StateError as e:
                state.stop()
                problem = str(e)
            now = time.monotonic()
            warn = now >= warn_at
            if warn:
                log.warning(
                    "the state of %s on cluster %s (%s) cannot be read yet (for %.0fs): %s; srm run goes on when it "
                    "can",
                    self.nodes.group_id,
                    spec.alias,
                    self.config.bootstrap_servers(spec.alias),
                    now - started,
                    problem,
                )
                interval = min(cap, interval * 2)
                warn_at = now + interval
            if not created:
                created = ensure_store_topics(
                    self.config, spec.alias, self._admin, metrics=self.options.metrics, warn=warn
                )
            stop.wait(min(_RETRY_S, max(0.5, warn_at - time.monotonic())))
        log.info(
            "state of %s on cluster %s (topic %s) read in %.1fs",
            self.nodes.group_id,
            spec.alias,
            spec.state_topic,
            time.monotonic() - started,
        )
        return state

    def _upgrade(self, spec: KafkaStoreSpec, state: KafkaState) -> None:
        """Carry over the state of the layout before the state topic, if its topic is there (once)."""
        legacy = legacy_store_topic(self.nodes.group_id)
        if state.get("upgrade", "store") is not None:
            return
        try:  # the topics were listed when the clusters were asked at the start
            topics = set(answered_topics(self.config, self._answers, _PROBE_S)(spec.alias))
        except Exception:  # not answered then: asked now
            topics = set(list_topics(self._admin(spec.alias)))
        if legacy not in topics:
            return
        points = spec.metrics_store_topic
        assert points is not None
        upgrade_store(
            state,
            legacy,
            lambda: read_legacy_store(spec.consumer, legacy),
            lambda: KafkaMetrics(points, spec.consumer, spec.producer).start(),
            state_table=self.options.state_table,
            metrics_table=self.options.metrics_table,
        )

    def _admin(self, alias: str) -> Any:
        conf = {**admin_config(self.config, alias, resolver=self._resolve_secret), "log_level": "0"}
        return build(_admin_kind(), conf, self.config, alias, "admin")

    def _start_aggregator(self) -> None:
        """The aggregation runs in a process of its own (a JVM: it must not share the workers' memory or GIL)."""
        env = {
            **os.environ,
            **self.worker_env("", ""),
            "SRM_METRICS_DIR": str(self.metrics_dir),
            "SRM_METRICS_TABLE": self.options.metrics_table,
            "SRM_METRICS_INTERVAL_SECONDS": str(self.config.metrics_aggregation_interval_seconds()),
        }
        where = self._store.metrics_store_topic if self._store else self.options.metrics_table
        log.info("metrics: raw records under %s, aggregated into %s", self.metrics_dir, where)
        self._aggregator = subprocess.Popen(
            [sys.executable, "-m", "srm.local.aggregator"], env=env, stdin=subprocess.DEVNULL
        )

    def _start_api(self) -> None:
        """The metrics API in a process of its own, with the environment the API function gets on AWS."""
        env = {
            **os.environ,
            **self.worker_env("", ""),
            "SRM_METRICS_TABLE": self.options.metrics_table,
            "SRM_METRICS_DIR": "",  # it reads metrics, it emits none
            "SRM_API_PORT": str(self.api_port),
            "SRM_API_STATE_DIR": str(self.options.state_dir.resolve()),
        }
        self._api = subprocess.Popen([sys.executable, "-m", "srm.local.api_server"], env=env, stdin=subprocess.DEVNULL)

    def _check_clusters(self) -> None:
        """Fail fast on settings librdkafka rejects, on a cluster that refuses srm's credentials or certificates
        (as MM2's Java clients stop on an authentication failure) and on two aliases of one cluster; warn (and keep
        going) when a cluster does not answer. Every cluster is asked (the state may be on any), side by side."""
        used = {a for f in self.config.enabled_flows() for a in f}
        probed = [a for a in sorted(self.config.clusters) if self.config.bootstrap_servers(a)]
        answers = self._answers = probe_clusters(self.config, probed, self._resolve_secret, timeout=_PROBE_S)
        for alias, answer in answers.items():
            if answer.refused is not None and alias in used:
                raise KafkaAccessError(f"cluster {alias} refuses the connection: {answer.refused}")
        check_distinct(answers)
        for alias, answer in answers.items():
            if answer.silent is not None and alias in used:
                log.warning(
                    "cluster %s (%s) does not answer yet (%s); replication starts when it does",
                    alias,
                    self.config.bootstrap_servers(alias),
                    answer.silent,
                )

    def _resolve_secret(self, provider: str, path: str) -> str:
        """References as the workers resolve them: the literal secrets of the file travel by their environment."""
        if provider == "env" and path in self._secret_env:
            return self._secret_env[path]
        return default_secret_resolver(provider, path)

    def run_until(self, stop: threading.Event, poll_seconds: float = 2.0) -> None:
        """Reconcile with the config table every ``poll_seconds``; look for dead workers five times a second."""
        next_reconcile = time.monotonic() + poll_seconds
        while not stop.wait(0.2):
            if self.fenced is not None:
                raise NodeFencedError(f"node {self.node_id} stops: {self.fenced}")
            try:
                self._restart_dead()
                if self._aggregator is not None and self._aggregator.poll() is not None:
                    log.error(
                        "metrics aggregation stopped (%s); restarting it", _exit_status(self._aggregator.returncode)
                    )
                    self._start_aggregator()
                if self._api is not None and self._api.poll() is not None:
                    log.error("metrics API stopped (%s); restarting it", _exit_status(self._api.returncode))
                    self._start_api()
            except Exception as e:
                log.error("cannot restart a worker: %s", e)
            if time.monotonic() < next_reconcile:
                continue
            next_reconcile = time.monotonic() + poll_seconds
            try:
                self.reconcile()
            except Exception as e:
                log.error("cannot reconcile workers with the configuration: %s", e)

    def reconcile(self) -> None:
        """Make the running workers match the enabled flows of the config table; restart dead ones."""
        assert self.config_store is not None
        self._wanted = set(self.config_store.load().enabled_flows())
        for (flow, index), process in list(self._workers.items()):
            if flow not in self._wanted:
                log.info("%s disabled: stopping its worker%s", Flow(*flow), _numbered(index))
                self._terminate(process)
                del self._workers[(flow, index)]
        self._restart_dead()

    def _restart_dead(self) -> None:
        """Start the wanted flows' missing workers. A worker that died is restarted at once, unless it keeps dying
        within ``_STABLE_S`` of its start: then after 1, 2, 4 … up to 60 s."""
        now = time.monotonic()
        for worker, process in list(self._workers.items()):
            if process.poll() is None:
                continue
            del self._workers[worker]
            flow, index = worker
            if process.returncode == FENCED_EXIT:
                self.fenced = f"{Flow(*flow)}'s worker was fenced: another node took over node id {self.node_id}"
                continue
            early = now - self._started.get(worker, now) < _STABLE_S
            exits = self._early_exits[worker] = self._early_exits.get(worker, 0) + 1 if early else 0
            delay = 0.0 if exits <= 1 else min(60.0, 2.0 ** (exits - 2))
            self._restarts[worker] = now + delay
            when = f"in {delay:.0f}s ({exits} exits in a row, each within {_STABLE_S:.0f}s of its start)"
            log.warning(
                "%s worker%s exited with %s; restarting it %s",
                Flow(*flow),
                _numbered(index),
                _exit_status(process.returncode),
                "now" if delay == 0 else when,
            )
        for flow in sorted(self._wanted):
            for index in range(self.options.workers):
                worker = (flow, index)
                if worker not in self._workers and now >= self._restarts.get(worker, 0.0):
                    self._workers[worker] = self._spawn(*flow, index)
                    self._started[worker] = time.monotonic()

    def _spawn(self, source: str, target: str, index: int = 0) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.worker_env(source, target), "SRM_WORKER_INDEX": str(index)}
        log.info("%s: starting worker%s", str(Flow(source, target)), _numbered(index))
        return subprocess.Popen([sys.executable, "-m", "srm.local.worker"], env=env, stdin=subprocess.DEVNULL)

    def worker_env(self, source: str, target: str) -> Mapping[str, str]:
        """The environment a flow's functions get: what template.yaml sets on AWS, pointed at the local store."""
        o = self.options
        return {
            "SRM_SOURCE": source,
            "SRM_TARGET": target,
            "SRM_CONFIG_TABLE": o.config_table,
            "SRM_STATE_TABLE": o.state_table,
            "SRM_CONFIG_CACHE_SECONDS": str(o.config_cache_seconds),
            "AWS_DEFAULT_REGION": o.region,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "local"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
            "POWERTOOLS_LOG_LEVEL": "INFO" if o.verbose else "WARNING",
            "POWERTOOLS_METRICS_DISABLED": "false" if o.verbose and o.metrics else "true",
            # remote querying: topic sync advertises the API; a run is named by its host and working directory
            **({"SRM_API_URL": f"http://127.0.0.1:{self.api_port}"} if self.api_port else {}),
            "SRM_DEPLOYMENT_NAME": f"{socket.gethostname()}:{o.state_dir.resolve().parent}",
            **({"SRM_METRICS_DIR": str(self.metrics_dir)} if o.metrics else {}),
            **self._store_env(),
            "SRM_DEAD_LETTER_DIR": str(o.state_dir.resolve() / "dead-letters"),
            "SRM_LOCAL_STATE_DIR": str(o.state_dir.resolve()),
            "SRM_NODE_ID": self.node_id,
            **self._secret_env,
            **o.extra_env,
        }

    def _store_env(self) -> dict[str, str]:
        """Where the processes find the shared state: the store cluster's topics, or ``--endpoint-url``."""
        store = self._store
        if store is None:
            return {"AWS_ENDPOINT_URL": self.endpoint_url or ""}
        scopes = split_scopes(self.config.properties, self.config.clusters)
        own = scopes.get(f"cluster#{store.alias}", {})
        properties = {**scopes.get("global", {}), **{f"{store.alias}.{k}": v for k, v in own.items()}}
        return {
            "SRM_STORE_CLUSTER": store.alias,
            "SRM_STORE_PROPERTIES": json.dumps(properties, sort_keys=True),
            "SRM_STATE_TOPIC": store.state_topic,
            **({"SRM_METRICS_TOPIC": store.metrics_topic} if store.metrics_topic else {}),
            **({"SRM_METRICS_STORE_TOPIC": store.metrics_store_topic} if store.metrics_store_topic else {}),
        }

    def stop(self, timeout: float = 10.0) -> None:
        with self._lifecycle:
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        workers, self._workers = list(self._workers.values()), {}
        for helper in (self._aggregator, self._api):
            if helper is not None:
                workers.append(helper)
        self._aggregator = self._api = None
        for process in workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in workers:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        if self.presence is not None:
            self.presence.leave()
            self.presence = None
        if self._state is not None:
            self._state.stop()
            self._state = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _numbered(index: int) -> str:
    """How a log line names a flow's worker: the first one plainly, a sibling by its number."""
    return f" {index + 1}" if index else ""


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def _admin_kind() -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient


def run(config: SrmConfig, options: RuntimeOptions, stop: threading.Event) -> int:
    """Run until ``stop`` is set (by SIGINT/SIGTERM); 0 on a clean stop, during the start too."""
    runtime = LocalRuntime(config, options)
    try:
        if not _start(runtime, stop):
            log.info("stopped while starting")
            return 0
        flows = ", ".join(str(Flow(*f)) for f in runtime.config.enabled_flows()) or "none enabled"
        log.info("running %s; stop with Ctrl-C", flows)
        runtime.run_until(stop)
    finally:
        runtime.stop()
    return 0


def _start(runtime: LocalRuntime, stop: threading.Event) -> bool:
    """Start ``runtime`` in a thread of its own; False when stopped first. A start waits for clusters (a metadata
    request, a topic created) up to seconds each, and a signal is only handled in the main thread once such a call
    returns: waiting here instead, a stop is prompt. The thread is left to its call: it takes no step once stopped,
    and being a daemon it does not delay the exit."""
    failed: list[BaseException] = []

    def start() -> None:
        try:
            runtime.start(stop)
        except _Stopped:
            pass
        except BaseException as e:  # raised in the main thread, as if started there
            failed.append(e)

    thread = threading.Thread(target=start, name="srm-start", daemon=True)
    thread.start()
    while thread.is_alive() and not stop.wait(0.2):
        pass
    thread.join(1.0 if stop.is_set() else None)  # a step that had ended by now is undone by stop()
    if failed:
        raise failed[0]
    return not stop.is_set()
