"""What every path reports: records and bytes moved, wall and CPU time, and the rates derived from them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Meter", "PathResult", "peak_rss_mb", "process_cpu_seconds"]


@dataclass
class PathResult:
    """One path on one workload. ``cpu_s`` is the CPU time of the process doing the work, every thread included
    (librdkafka's too): on a 1-vCPU Lambda function all of it competes for the one core."""

    records: int = 0
    bytes: int = 0  # keys + values
    wall_s: float = 0.0
    cpu_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.wall_s if self.wall_s else 0.0

    @property
    def core_s(self) -> float:
        """Seconds of one core the work needs: its CPU time, or its wall time when it waited longer than it ran."""
        return max(self.wall_s, self.cpu_s)

    @property
    def records_per_core_s(self) -> float:
        return self.records / self.core_s if self.core_s else 0.0

    @property
    def mb_per_core_s(self) -> float:
        return self.bytes / 1e6 / self.core_s if self.core_s else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "records_per_s": round(self.records_per_s),
            "mb_per_s": round(self.mb_per_s, 2),
            "records_per_core_s": round(self.records_per_core_s),
            "mb_per_core_s": round(self.mb_per_core_s, 2),
            **self.extra,
        }


class Meter:
    """Wall and process CPU time between ``start()`` and ``stop()``."""

    def __init__(self) -> None:
        self._wall = self._cpu = 0.0
        self.wall_s = self.cpu_s = 0.0

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall_s += time.perf_counter() - self._wall
        self.cpu_s += time.process_time() - self._cpu


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """The peak resident set size of a process (VmHWM), in MB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def process_label(pid: int) -> str:
    """A short name for a process of a replicator: the module of ``python -m <module>``, else the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return f"pid {pid}"
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        return "supervisor" if module == "srm.cli.srm" else module.rpartition(".")[2]
    return Path(argv[0]).name or f"pid {pid}"
