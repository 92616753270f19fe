"""Local Kafka clusters for the demo, the tests and the benchmark: one ``noida-db`` process per cluster, on a
free loopback port, with its own data dir, stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from srm.local.store import free_port

__all__ = ["ClusterError", "LocalCluster", "noida_binary"]


class ClusterError(RuntimeError):
    pass


def noida_binary() -> str:
    """The ``noida-db`` command of this environment (installed with ``serverless-srm[local]``)."""
    candidate = Path(sys.executable).parent / "noida-db"
    found = str(candidate) if candidate.exists() else shutil.which("noida-db")
    if not found:
        raise ClusterError("noida-db is not installed: pip install 'serverless-srm[local]' (or run make install)")
    return found


@dataclass
class LocalCluster:
    alias: str
    data_dir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LocalCluster:
        if self.process is not None:
            return self
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.data_dir.parent / f"{self.alias}.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            [
                noida_binary(),
                "start",
                "--only",
                "kafka",
                "--kafka-port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ClusterError(
                    f"kafka {self.alias} exited during start (see {self.data_dir.parent}/{self.alias}.log)"
                )
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception:
                time.sleep(0.1)
        raise ClusterError(f"kafka {self.alias} did not answer on {self.bootstrap} within {timeout:.0f}s")

    def stop(self, timeout: float = 15.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)

    def restart(self) -> None:
        """Stop and start on the same port and data dir (what a broker restart is)."""
        self.stop()
        self.start()
