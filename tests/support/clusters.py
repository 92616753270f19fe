"""Kafka for the tests: noida-db clusters started here (free loopback ports, private data dirs, stopped by PID),
or the clusters named by ``SRM_TEST_BOOTSTRAP_A``/``_B``/``_C`` when set (then nothing is started)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from srm.local.clusters import LocalCluster

ALIASES = ("A", "B", "C")


def external_bootstrap(letter: str) -> str | None:
    return os.environ.get(f"SRM_TEST_BOOTSTRAP_{letter}") or None


def using_external_clusters() -> bool:
    return any(external_bootstrap(letter) for letter in ALIASES)


@dataclass
class Cluster:
    """A cluster under test; ``local`` is None for an external cluster (which tests cannot restart)."""

    name: str
    bootstrap: str
    local: LocalCluster | None = None

    def restart(self) -> None:
        if self.local is None:
            raise RuntimeError("cannot restart an external cluster")
        self.local.restart()

    def stop(self, graceful: bool = True) -> None:
        if self.local is not None:
            self.local.stop(graceful=graceful)

    def start(self) -> None:
        if self.local is not None:
            self.local.start()


@contextmanager
def running_clusters(base: Path, names: tuple[str, ...]) -> Iterator[dict[str, Cluster]]:
    """The clusters by name while the block runs; the ones started here are stopped (by PID) afterwards."""
    started = start_clusters(base, names)
    try:
        yield {c.name: c for c in started}
    finally:
        for c in started:
            c.stop(graceful=False)  # their data dirs are thrown away


def start_clusters(base: Path, names: tuple[str, ...]) -> list[Cluster]:
    if using_external_clusters():
        clusters = []
        for name, letter in zip(names, ALIASES, strict=False):
            bootstrap = external_bootstrap(letter)
            if not bootstrap:
                raise RuntimeError(f"SRM_TEST_BOOTSTRAP_{letter} is not set (set A, B and C together)")
            clusters.append(Cluster(name, bootstrap))
        return clusters
    started = []
    try:
        for name in names:
            local = LocalCluster(name, base / name / "data").start()
            started.append(Cluster(name, local.bootstrap, local))
    except Exception:
        for c in started:
            c.stop(graceful=False)
        raise
    return started
