"""Local Kafka clusters for the demo, the tests and the benchmark: one ``noida-db`` process per cluster, on a
free loopback port, with its own data dir, stopped by PID."""

from __future__ import annotations

import contextlib
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

    def stop(self, timeout: float = 15.0, graceful: bool = True) -> None:
        """SIGTERM to the process group (SIGKILL at once when not ``graceful``: for a data dir about to be thrown
        away), SIGKILL after ``timeout``; returns when every process of it is gone (the launcher exits at once, the
        broker itself may take a while to shut down)."""
        process, self.process = self.process, None
        if process is None:
            return
        group = process.pid  # started with start_new_session: the group of the launcher and the broker
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM if graceful else signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while _group_alive(group):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                deadline = time.monotonic() + timeout
            time.sleep(0.05)
            with contextlib.suppress(ChildProcessError):
                process.poll()  # reap the launcher

    def restart(self) -> None:
        """Stop and start on the same port and data dir (what a broker restart is)."""
        self.stop()
        self.start()
