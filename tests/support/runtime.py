"""``srm run`` as a user runs it: a subprocess with a config file, stopped with SIGINT."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.kafka import wait_replicated


def write_config(
    path: Path, clusters: Mapping[str, str], flows: Mapping[str, Mapping[str, Any]], **settings: Any
) -> Path:
    """A YAML config: ``clusters`` alias → bootstrap, ``flows`` "a->b" → settings, the rest global. Its nodes form a
    cluster of their own (``nodes.group.id``): other tests' runs on the shared clusters share no state with it."""
    doc: dict[str, Any] = {
        "clusters": {alias: {"bootstrap.servers": b} for alias, b in clusters.items()},
        "flows": {name: {"enabled": True, **f} for name, f in flows.items()},
        "replication.factor": 1,
        "refresh.topics.interval.seconds": 1,
        "event.source.batching.window.ms": 50,
        "emit.heartbeats.interval.seconds": 1,
        "nodes.group.id": f"srm-test-{uuid.uuid4().hex[:8]}",
        **settings,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


STARTED: list[SrmRun] = []  # the runs of the current test (and still running ones), whose logs a failure reports


def run_log_tails(lines: int = 60) -> dict[str, str]:
    """The last lines of the logs in the directory of each ``srm run`` in :data:`STARTED` (earlier lives too)."""
    tails = {}
    for workdir in dict.fromkeys(run.workdir for run in STARTED):
        for log in sorted(workdir.glob("srm-run*.log")):
            with contextlib.suppress(OSError):
                tails[f"srm run ({log})"] = "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return tails


class SrmRun:
    """A running ``srm run --config FILE`` (``--connectors DIR`` for a folder); its output goes to ``log``."""

    def __init__(
        self,
        config: Path,
        workdir: Path,
        extra_args: tuple[str, ...] = (),
        *,
        own_group: bool = False,
        metrics: bool = False,  # a Spark JVM per test would not fit the suite's time: only metrics tests want it
        api: bool = False,  # nor the metrics API's process: only the tests of the API want it
    ) -> None:
        """``own_group``: in a process group of its own (with its workers and store), for :meth:`kill_group`."""
        self.log = workdir / "srm-run.log"
        self.workdir = workdir
        if self.log.exists():  # a run restarted in its directory: the earlier life's log is kept beside it
            self.log.rename(workdir / f"srm-run.{len(list(workdir.glob('srm-run.*.log'))) + 1}.log")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "srm.cli.srm",
                "run",
                "--connectors" if config.is_dir() else "--config",  # a folder: connector definitions
                str(config),
                *(() if metrics else ("--no-metrics",)),
                *(() if api or metrics else ("--no-api",)),
                *extra_args,
            ],
            cwd=workdir,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=own_group,
        )
        STARTED.append(self)

    def kill_group(self) -> None:
        """SIGKILL srm run and every process of its group (workers, store) at once: a crash, nothing cleaned up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()
        return self.process.returncode

    def __enter__(self) -> SrmRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 60.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``srm`` or ``srm-control`` (``args[0]``) to completion."""
    module = {"srm": "srm.cli.srm", "srm-control": "srm.cli.control"}[args[0]]
    return subprocess.run(
        [sys.executable, "-m", module, *args[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def srm_run(
    workdir: Path,
    clusters: Mapping[str, str],
    flows: Mapping[str, Mapping[str, Any]],
    *,
    args: tuple[str, ...] = (),
    **settings: Any,
) -> SrmRun:
    """``srm run ARGS`` in ``workdir`` on the config :func:`write_config` writes there (``srm.yaml``)."""
    return SrmRun(write_config(workdir / "srm.yaml", clusters, flows, **settings), workdir, args)


@contextlib.contextmanager
def replicating(workdir: Path, a: str, b: str, topic: str, timeout: float = 120) -> Iterator[SrmRun]:
    """``srm run`` in ``workdir`` replicating ``topic`` a->b: the block runs once the remote topic holds every record
    ``topic`` held."""
    with srm_run(workdir, {"a": a, "b": b}, {"a->b": {"topics": topic}}) as run:
        wait_replicated(a, topic, b, f"a.{topic}", timeout=timeout)
        yield run


def srm_control(cwd: Path, *args: str) -> str:
    """The output of ``srm-control --local ARGS`` run in an ``srm run``'s workdir, which must succeed."""
    result = run_cli("srm-control", "--local", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def status_text(cwd: Path) -> str:
    """What ``srm-control --local status`` shows of the ``srm run`` in ``cwd``."""
    return srm_control(cwd, "status", "--timeout", "10")


def group_offsets(cwd: Path, group: str, *args: str, target: str = "b") -> subprocess.CompletedProcess[str]:
    """``srm-control --local offsets`` of ``group`` for the flow a->``target``, run in an ``srm run``'s workdir."""
    return run_cli(
        "srm-control", "--local", "offsets", "--source", "a", "--target", target, "--group", group, *args, cwd=cwd
    )


def wait_log(run: SrmRun, text: str, timeout: float = 30.0, since: int = 0) -> int:
    """Wait until ``text`` is in the output after its first ``since`` characters; where it is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = run.output().find(text, since)
        if at >= 0:
            return at
        if not run.alive():
            break
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in srm run output:\n{run.output()[-3000:]}")


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid``, from /proc (no psutil)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, …
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(stat.parent.name))
    return children


def pid_alive(pid: int) -> bool:
    """True while the process exists (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def write_properties(path: Path, lines: Mapping[str, str]) -> Path:
    """An ``mm2.properties`` file: ``key = value`` lines, written as given (escape backslashes yourself)."""
    path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
    return path


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """A JSON request to srm's HTTP API as any client sends it: its status and JSON answer (4xx and 5xx included)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
