"""Kafka for the tests: Apache Kafka clusters started here (``srm.local.clusters``: KRaft, free loopback ports,
private data dirs, stopped by PID), or the clusters named by ``SRM_TEST_BOOTSTRAP_A``/``_B``/``_C`` when set (then
nothing is started). The logs of the clusters started here are attached to a failing test's report."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from srm.local.clusters import LocalCluster

ALIASES = ("A", "B", "C")

# every cluster started by this process and still running, for the failure report
RUNNING: list[LocalCluster] = []


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


class SharedClusters(dict[str, Cluster]):
    """Clusters by name; one of :data:`ALIASES` not started yet is started by ``start(name)`` when first asked for."""

    def __init__(self, started: dict[str, Cluster], start: Callable[[str], Cluster]) -> None:
        super().__init__(started)
        self._start = start

    def __missing__(self, name: str) -> Cluster:
        if name.upper() not in ALIASES:
            raise KeyError(name)
        self[name] = cluster = self._start(name)
        return cluster


@contextmanager
def running_clusters(base: Path, names: tuple[str, ...]) -> Iterator[dict[str, Cluster]]:
    """The clusters by name while the block runs; the ones started here are stopped (by PID) afterwards."""
    started = start_clusters(base, names)
    try:
        yield {c.name: c for c in started}
    finally:
        for c in started:
            c.stop(graceful=False)  # their data dirs are thrown away
            forget(c)


def start_clusters(base: Path, names: tuple[str, ...]) -> list[Cluster]:
    if using_external_clusters():
        clusters = []
        for name, letter in zip(names, ALIASES, strict=False):
            bootstrap = external_bootstrap(letter)
            if not bootstrap:
                raise RuntimeError(f"SRM_TEST_BOOTSTRAP_{letter} is not set (set A, B and C together)")
            clusters.append(Cluster(name, bootstrap))
        return clusters
    locals_ = [LocalCluster(name, base / name / "data") for name in names]
    with ThreadPoolExecutor(len(locals_)) as pool:  # the JVMs start side by side
        outcomes = [pool.submit(local.start) for local in locals_]
    errors = [o.exception() for o in outcomes if o.exception() is not None]
    if errors:
        for local in locals_:
            local.stop(graceful=False)
        raise errors[0]  # type: ignore[misc]
    RUNNING.extend(locals_)
    return [Cluster(local.alias, local.bootstrap, local) for local in locals_]


def forget(cluster: Cluster) -> None:
    if cluster.local in RUNNING:
        RUNNING.remove(cluster.local)


def log_tails(lines: int = 40) -> dict[str, str]:
    """The last lines of each running cluster's log, by alias and data dir."""
    tails = {}
    for local in RUNNING:
        try:
            text = local.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        tails[f"kafka {local.alias} ({local.data_dir.parent})"] = "\n".join(text)
    return tails
