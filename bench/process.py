"""A replicator under measurement: one command in a session of its own, its output in a log file."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

__all__ = ["Replicator"]


class Replicator:
    """Started as a user starts it; :meth:`stop` sends ``stop_signal`` (killed if it does not stop within 30 s)."""

    stop_signal = signal.SIGTERM

    def __init__(self, command: list[str], workdir: Path, log_name: str) -> None:
        self.log = workdir / log_name
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            cwd=workdir,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C on the bench reaches it through stop(), in order
        )

    def pids(self) -> list[int]:
        """The process and its live children."""
        found = [self.process.pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and int(fields[1]) == self.process.pid:
                found.append(int(stat.parent.name))
        return found

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()
