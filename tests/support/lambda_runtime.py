"""The built functions run as Lambda runs them: the ``sam build`` output, each function in its own AWS Lambda Runtime
Interface Emulator (RIE) with ``awslambdaric`` as its runtime client, invoked over RIE's invoke endpoint.

The function's process sees what Lambda's ``python3.12`` runtime gives it and nothing more: the runtime's Python with
``awslambdaric`` and boto3 (``.venv-lambda``, from ``make install``), its code directory as the working directory
(``LAMBDA_TASK_ROOT``) and the built layer's ``python/`` on ``PYTHONPATH`` (Lambda mounts it as ``/opt/python``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srm.local.store import free_port
from tests.support.sam import ROOT, SAM, TEMPLATE, sam_build

__all__ = ["LAMBDA_VENV", "RIE", "FunctionRuntime", "Invocation", "built_functions"]

LAMBDA_VENV = ROOT / ".venv-lambda"
RIE = LAMBDA_VENV / "bin" / "aws-lambda-rie"
PYTHON = LAMBDA_VENV / "bin" / "python"
BUILDS = ROOT / "build" / "lambda-runtime"
_INIT = re.compile(r"Init Duration: ([0-9.]+) ms")
_DURATION = re.compile(r"\tDuration: ([0-9.]+) ms")
_SOURCES = ("template.yaml", "functions", "layers/lambda")


def _sources_hash(architecture: str) -> str:
    """What a build depends on, symlinks followed (the layer's tree is links into layers/core)."""
    digest = hashlib.sha256(f"{architecture} {SAM.resolve()}".encode())
    for top in _SOURCES:
        root = ROOT / top
        files = [root] if root.is_file() else []
        for folder, dirs, names in os.walk(root, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [Path(folder) / n for n in sorted(names) if not n.endswith(".pyc")]
        for path in files:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_functions(runtime: str, architecture: str) -> Path:
    """The ``sam build`` output for ``architecture``, built once per change of its sources: a build takes about a
    minute, so it is kept under ``build/lambda-runtime/<hash>`` (older builds are removed)."""
    build = BUILDS / f"{architecture}-{_sources_hash(architecture)}"
    BUILDS.parent.mkdir(parents=True, exist_ok=True)
    # another test session (make test beside a single module's run) may be building the same sources
    with (BUILDS.parent / "lambda-runtime.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (build / ".complete").exists():
            return build
        if BUILDS.exists():
            for old in BUILDS.iterdir():  # earlier builds, and the build.toml SAM writes beside a build
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink()
        done = sam_build(build, runtime, architecture=architecture)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (build / ".complete").touch()
        return build


def template_runtime() -> str:
    match = re.search(r"^    Runtime: (python3\.\d+)$", TEMPLATE.read_text(), re.MULTILINE)
    assert match, "template.yaml's Globals name the functions' runtime"
    return match[1]


@dataclass(frozen=True)
class Invocation:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def failed(self) -> bool:
        """A function error: Lambda answers with its error object (``errorType``, ``errorMessage``)."""
        answer = self.json()
        return isinstance(answer, dict) and "errorType" in answer and "errorMessage" in answer


class FunctionRuntime:
    """One built function in one RIE process on free loopback ports (its invoke endpoint and the Runtime API the
    runtime client polls), started and stopped by process id; its output, RIE's REPORT lines among it, goes to
    ``log``."""

    def __init__(self, code: Path, layer: Path, env: Mapping[str, str], log: Path) -> None:
        assert RIE.exists() and PYTHON.exists(), "the Lambda runtime (RIE, awslambdaric) is installed by `make install`"
        self.code, self.layer, self.env, self.log = code, layer, dict(env), log
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> FunctionRuntime:
        env = {
            "PATH": os.environ["PATH"],
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            "PYTHONDONTWRITEBYTECODE": "1",  # Lambda's /opt and /var/task are read-only: every cold start compiles
            "PYTHONPATH": str(self.layer / "python"),
            "LAMBDA_TASK_ROOT": str(self.code),
            "AWS_LAMBDA_FUNCTION_NAME": self.code.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_FUNCTION_TIMEOUT": "120",
            **self.env,
        }
        command = [
            str(RIE),
            "--log-level",
            "error",
            "--runtime-interface-emulator-address",
            f"127.0.0.1:{self.port}",
            "--runtime-api-address",  # RIE's default (127.0.0.1:9001) would be shared by every RIE
            f"127.0.0.1:{free_port()}",
            str(PYTHON),
            "-m",
            "awslambdaric",
            "app.lambda_handler",
        ]
        with self.log.open("ab") as out:
            # a session of its own: stopping it stops the runtime client RIE started too
            self._process = subprocess.Popen(
                command, cwd=self.code, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process.poll() is None, f"RIE exited: {self.log.read_text()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"RIE did not listen on {self.port} within {timeout} s")

    def invoke(self, payload: Any, timeout: float = 120.0) -> Invocation:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        url = f"http://127.0.0.1:{self.port}/2015-03-31/functions/function/invocations"
        request = urllib.request.Request(url, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return Invocation(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as e:
            return Invocation(e.code, dict(e.headers), e.read())

    def init_durations_ms(self) -> list[float]:
        """The Init Duration of each REPORT line: one per cold start. RIE reports it without waiting for the runtime
        client's first poll, so the import of the handler shows in the first invocation's duration instead."""
        return [float(m) for m in _INIT.findall(self.log.read_text(errors="replace"))]

    def durations_ms(self) -> list[float]:
        """The Duration of each invocation, in order (REPORT lines)."""
        return [float(m) for m in _DURATION.findall(self.log.read_text(errors="replace"))]

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(5)
