"""Local Apache Kafka clusters for the demo, the tests and the benchmark.

Each cluster is Apache Kafka in KRaft combined mode (every node a broker and a controller): free loopback ports, its
own data dir, formatted once (``kafka.tools.StorageTool format``), started as ``kafka.Kafka``, ready when it answers a
metadata request naming all of its brokers, stopped by PID (SIGTERM, then SIGKILL). One node by default; three where
replication factor > 1 is needed. Settings suit a 2-core machine: few threads, few internal partitions, no initial
rebalance delay. Topics are auto-created as Kafka's default has it, so a test sees srm never relies on that (MSK's
default is the other way).

The jars come from :mod:`srm.local.kafka` (``make install``), which then runs ``python -m srm.local.clusters archive``
to write a class-data archive of a broker's start beside them (:func:`archive_classes`): a broker mapping it starts
on about a third of the CPU. Extra JVM
options for the brokers come from ``SRM_KAFKA_JVM_OPTIONS`` (the tests run the JIT's quick tier only,
``-XX:TieredStopAtLevel=1``: their brokers start often and carry little traffic).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from srm.local.kafka import libs_dir
from srm.local.store import free_port

__all__ = [
    "LOG4J2_PROPERTIES",
    "ClusterError",
    "Listener",
    "LocalCluster",
    "archive_classes",
    "class_archive",
    "extra_jvm_options",
]

# Kafka at INFO (a failing test shows what the broker did), everything else at WARN
LOG4J2_PROPERTIES = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.config.name = kafka.server.KafkaConfig
logger.config.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""

# Quick start and a small footprint; the JIT stays on (the benchmark measures the brokers too).
# No hsperfdata: its sampling thread wakes every 50 ms (an idle broker's CPU, with the line below, down 40 %).
_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx768m",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

_EXTRA_JVM_OPTIONS_ENV = "SRM_KAFKA_JVM_OPTIONS"


def class_archive(version: str | None = None) -> Path:
    """Where the broker's class-data archive of Kafka ``version`` lives (beside its jars)."""
    return libs_dir(version).parent / "broker-classes.jsa"


def extra_jvm_options() -> tuple[str, ...]:
    """What ``SRM_KAFKA_JVM_OPTIONS`` adds to the command line of the local Kafka JVMs (brokers, MirrorMaker 2)."""
    return tuple(shlex.split(os.environ.get(_EXTRA_JVM_OPTIONS_ENV, "")))


def archive_classes(version: str | None = None) -> Path:
    """Write Kafka ``version``'s class-data archive (unless there): the classes a one-node broker loads to start,
    create a topic and serve a produce and a fetch, dumped when it stops."""
    archive = class_archive(version)
    if archive.exists():
        return archive
    import tempfile

    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="srm-archive-") as work:
        cluster = LocalCluster("archive", Path(work) / "data", version=version, archive=partial)
        cluster.start()
        try:
            _serve_once(cluster.bootstrap)
        finally:
            cluster.stop(graceful=True, timeout=60)  # the archive is written as the JVM exits
    if not partial.exists():
        raise ClusterError(f"the broker of Kafka {version or 'default'} wrote no class-data archive")
    partial.rename(archive)
    return archive


def _serve_once(bootstrap: str) -> None:
    """A topic created, a record produced idempotently, fetched and its offset committed (the clients are closed
    here, before the broker stops)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("classes", 1, 1)])["classes"].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 3})
    producer.produce("classes", b"x")
    producer.flush(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "classes"})
    consumer.assign([TopicPartition("classes", 0, 0)])
    consumer.consume(1, 30)
    consumer.commit(asynchronous=False)
    consumer.close()


# For a 2-core machine running several clusters at once.
_BROKER_DEFAULTS = {
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "num.replica.fetchers": "1",
    "log.cleaner.threads": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.num.partitions": "1",
    # timed-out transactions are aborted within 2 s of their timeout, not 10 s
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
    # an idle controller appends a no-op record to the metadata log every 10 s, not twice a second
    "metadata.max.idle.interval.ms": "10000",
}


class ClusterError(RuntimeError):
    pass


@dataclass
class Listener:
    """An extra client listener: ``name`` is its listener name, ``protocol`` its security protocol (SASL_SSL, SSL,
    SASL_PLAINTEXT, PLAINTEXT); its settings go in the cluster's ``config`` as Kafka's ``listener.name.<name>.…`` keys.
    ``advertised_port``, when set, is the port the broker tells clients to connect to instead of ``port``: that of a
    proxy in front of the listener, through which every connection of a client bootstrapped there then goes."""

    name: str
    protocol: str
    port: int = 0
    advertised_port: int = 0


def _cluster_id() -> str:
    """Kafka's form of a random Uuid; never starting with "-", which the tool would take for an option."""
    while (text := base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()).startswith("-"):
        pass
    return text


def _java_failure(output: bytes) -> str:
    """The line of a JVM tool's output that says why it failed: the root cause of a stack trace, else the last."""
    lines = [ln.strip() for ln in output.decode(errors="replace").splitlines() if ln.strip()]
    causes = [ln for ln in lines if ln.startswith("Caused by:")]
    errors = [ln for ln in lines if "Exception" in ln or "Error" in ln or ln.startswith("error:")]
    return (causes or errors or lines or ["no output"])[-1 if causes else 0]


def _group_alive(group: int) -> bool:
    """Whether a process of the group still runs (zombies waiting to be reaped do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # fields after "(comm)": state, ppid, pgrp, …
            return True
    return False


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    process: subprocess.Popen[bytes] | None = None


@dataclass
class LocalCluster:
    """``brokers`` nodes of Apache Kafka; ``config`` adds or overrides broker settings, ``listeners`` adds client
    listeners beside PLAINTEXT (which stays the inter-broker listener), ``scram_users`` (name → password) are
    SCRAM-SHA-512 and SCRAM-SHA-256 users created when the storage is formatted."""

    alias: str
    data_dir: Path
    port: int = 0
    brokers: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    listeners: list[Listener] = field(default_factory=list)
    scram_users: Mapping[str, str] = field(default_factory=dict)
    version: str | None = None  # of Kafka (default: srm.local.kafka.kafka_version())
    archive: Path | None = None  # write the brokers' class-data archive here as they exit (see archive_classes)
    _nodes: list[_Node] = field(default_factory=list, repr=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes) if self._nodes else f"127.0.0.1:{self.port}"

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap address of the extra listener ``name`` (first node), as advertised."""
        listener = next(lst for lst in self.listeners if lst.name == name)
        return f"127.0.0.1:{listener.advertised_port or listener.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.alias}.log"

    @property
    def running(self) -> bool:
        return any(n.process is not None for n in self._nodes)

    def node_pids(self) -> list[int]:
        return [n.process.pid for n in self._nodes if n.process is not None]

    # ----------------------------------------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> LocalCluster:
        if self.running:
            return self
        self._allocate()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        self._format()
        for node in self._nodes:
            self._launch(node)
        self._wait_ready(timeout)
        return self

    def stop(self, timeout: float = 30.0, graceful: bool = True) -> None:
        """SIGTERM every node (SIGKILL at once when not ``graceful``: for a data dir about to be thrown away), SIGKILL
        after ``timeout``; returns when every process is gone."""
        for node in self._nodes:
            self._signal(node, signal.SIGTERM if graceful else signal.SIGKILL)
        for node in self._nodes:
            self._reap(node, timeout)

    def restart(self) -> None:
        """Stop and start on the same ports and data dirs (what a broker restart is)."""
        self.stop()
        self.start()

    def stop_node(self, index: int, graceful: bool = True, timeout: float = 30.0) -> None:
        node = self._nodes[index]
        self._signal(node, signal.SIGTERM if graceful else signal.SIGKILL)
        self._reap(node, timeout)

    def start_node(self, index: int, timeout: float = 90.0) -> None:
        node = self._nodes[index]
        if node.process is None:
            self._launch(node)
        self._wait_ready(timeout)

    # ----------------------------------------------------------------------------------------------------------
    def _allocate(self) -> None:
        if self._nodes:
            return
        ports = [self.port or free_port()] + [free_port() for _ in range(self.brokers - 1)]
        self.port = ports[0]
        self._nodes = [_Node(i + 1, ports[i], free_port()) for i in range(self.brokers)]
        for listener in self.listeners:
            listener.port = listener.port or free_port()

    def _node_dir(self, node: _Node) -> Path:
        return self.data_dir / f"node-{node.node_id}"

    def _properties(self, node: _Node) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self._nodes)
        # extra listeners live on the first node only: enough for a client to connect through them
        extra = self.listeners if node is self._nodes[0] else []
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"] + [f"{x.name}://127.0.0.1:{x.port}" for x in extra]
        advertised = [listeners[0]] + [f"{x.name}://127.0.0.1:{x.advertised_port or x.port}" for x in extra]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"] + [f"{x.name}:{x.protocol}" for x in self.listeners]
        replicas = str(min(3, self.brokers))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self._node_dir(node) / "data"),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "2" if self.brokers > 1 else "1",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "1",
            **_BROKER_DEFAULTS,
            **self.config,
        }
        return props

    def _java(self, main: str, *args: str, jvm: tuple[str, ...] = ()) -> list[str]:
        java_home = os.environ.get("JAVA_HOME")
        java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
        if java is None:
            raise ClusterError("java is not on PATH: the local Kafka clusters need Java 17+")
        log4j = self.data_dir / "log4j2.properties"
        return [
            java,
            *jvm,
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            str(libs_dir(self.version) / "*"),
            main,
            *args,
        ]

    def _jvm_options(self) -> tuple[str, ...]:
        classes = (f"-XX:ArchiveClassesAtExit={self.archive}",) if self.archive else self._shared_classes()
        return (*_JVM_OPTIONS, *classes, *extra_jvm_options())

    def _shared_classes(self) -> tuple[str, ...]:
        archive = class_archive(self.version)
        # the JVM checks the archive against its own build and the jars, and starts without it if they differ
        return (f"-XX:SharedArchiveFile={archive}",) if archive.exists() else ()

    def _write_properties(self, node: _Node) -> Path:
        path = self._node_dir(node) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()))
        return path

    def _format(self) -> None:
        """Format the nodes' storage once (a restart keeps it); in parallel, the JVM start is the slow part."""
        pending = [n for n in self._nodes if not (self._node_dir(n) / "data" / "meta.properties").exists()]
        if not pending:
            for node in self._nodes:
                self._write_properties(node)  # ports are kept across restarts; the file is rewritten all the same
            return
        cluster_id = _cluster_id()
        scram = []
        for user, password in self.scram_users.items():
            for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                scram += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        for attempt in (1, 2):  # a format that failed wrote nothing; once more before giving up
            runs = []
            for node in pending:
                properties = self._write_properties(node)
                args = ("format", "-t", cluster_id, "-c", str(properties), "--ignore-formatted", *scram)
                command = self._java(
                    "kafka.tools.StorageTool",
                    *args,
                    jvm=("-Xmx256m", "-XX:TieredStopAtLevel=1", *self._shared_classes()),
                )
                runs.append((node, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
            failed = []
            for node, run in runs:
                out, _ = run.communicate(timeout=120)
                if run.returncode != 0:
                    with open(self.log_path, "ab") as log:  # the whole story, for the failing test's report
                        log.write(f"format of node {node.node_id} failed (attempt {attempt}):\n".encode() + out)
                    failed.append((node, out))
            if not failed:
                return
            pending = [node for node, _ in failed]
        raise ClusterError(f"cannot format kafka {self.alias}'s storage: {_java_failure(failed[0][1])}")

    def _launch(self, node: _Node) -> None:
        properties = self._write_properties(node)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        node.process = subprocess.Popen(
            self._java("kafka.Kafka", str(properties), jvm=self._jvm_options()),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        live = [n for n in self._nodes if n.process is not None]
        admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{n.port}" for n in live), "log_level": 0})
        while time.monotonic() < deadline:
            for node in live:
                if node.process is not None and node.process.poll() is not None:
                    raise ClusterError(f"kafka {self.alias} exited during start: {self._log_tail()}")
            try:
                if len(admin.list_topics(timeout=1.0).brokers) >= len(live):
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise ClusterError(f"kafka {self.alias} did not answer on {self.bootstrap} within {timeout:.0f}s")

    def _log_tail(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return f"see {self.log_path}"
        errors = [ln for ln in lines if " ERROR " in ln or "Exception" in ln]
        return (errors or lines or [f"see {self.log_path}"])[-1].strip()

    @staticmethod
    def _signal(node: _Node, sig: signal.Signals) -> None:
        if node.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, sig)

    @staticmethod
    def _reap(node: _Node, timeout: float) -> None:
        process, node.process = node.process, None
        if process is None:
            return
        group = process.pid  # started with start_new_session
        deadline = time.monotonic() + timeout
        while _group_alive(group):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                deadline = time.monotonic() + timeout
            time.sleep(0.05)
            with contextlib.suppress(ChildProcessError):
                process.poll()
        with contextlib.suppress(ChildProcessError):
            process.wait(1)


def main(argv: list[str] | None = None) -> int:
    """``python -m srm.local.clusters archive [VERSION ...]``: write the class-data archives (run by ``make install``
    after :mod:`srm.local.kafka` installed the jars)."""
    import argparse
    import sys

    from srm.local.kafka import COMPATIBILITY_VERSIONS, HOME_ENV, KAFKA_VERSION, KafkaInstallError

    parser = argparse.ArgumentParser(prog="python -m srm.local.clusters", description="Local Apache Kafka clusters.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("archive", help="write the brokers' class-data archive of each version (once)")
    cmd.add_argument("versions", nargs="*", help=f"default: {KAFKA_VERSION} and {', '.join(COMPATIBILITY_VERSIONS)}")
    args = parser.parse_args(argv)
    if os.environ.get(HOME_ENV):
        print(f"srm: {HOME_ENV} is set: its brokers start without a class-data archive")
        return 0
    for version in args.versions or (KAFKA_VERSION, *COMPATIBILITY_VERSIONS):
        try:
            print(f"Apache Kafka {version}: broker class-data archive {archive_classes(version)}")
        except (KafkaInstallError, ClusterError) as e:
            print(f"srm: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
