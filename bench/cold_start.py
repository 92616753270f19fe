"""``make bench``'s cold start, per function: what its first invocation pays before the handler runs — the imports of
its entry point, as ``python -X importtime`` reports them (median of three fresh processes):

* ``layer_s``: the ``sam build`` output as Lambda runs it — the runtime's Python with only what Lambda's runtime
  brings (``.venv-lambda``), the built layer as ``/opt/python`` with the bytecode it ships, none written (Lambda's
  ``/opt`` and ``/var/task`` are read-only);
* ``dev_s``: the same handler's import in the development venv, bytecode cached.

* ``rie_init_ms``, ``first_ms``, ``warm_ms``: the built function in the Lambda Runtime Interface Emulator (as
  tests/lambda runs it), invoked twice with its sample event from ``events/`` against a DynamoDB (moto) without
  srm's tables, so that it fails at its first AWS call: RIE's ``Init Duration``, and the ``Duration`` of the first and
  second invocation. RIE reports the init without waiting for the runtime client's first poll (microseconds): the
  imports show in the first invocation's duration, the warm one is what an invocation costs after them."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.events import load_event
from tests.support.lambda_runtime import PYTHON as LAMBDA_PYTHON
from tests.support.lambda_runtime import FunctionRuntime, built_functions, template_runtime
from tests.support.moto_stacks import moto_server
from tests.support.sam import MACHINE_ARCHITECTURE, layer_dir

__all__ = ["GOAL_S", "measure"]

GOAL_S = 0.3  # per function, on this machine
_LINE = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)\s*$")


def _import_s(python: str, module: str, cwd: Path, env: dict[str, str], runs: int = 3) -> float:
    """The cumulative import time of ``module`` in a fresh interpreter, median of ``runs``."""
    times = []
    for _ in range(runs):
        done = subprocess.run(
            [python, "-X", "importtime", "-c", f"import {module}"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        found = [int(m[1]) for line in done.stderr.splitlines() if (m := _LINE.match(line)) and m[2] == module]
        if not found:
            raise RuntimeError(f"{module}: no import time reported ({done.stderr[-300:]})")
        times.append(found[-1] / 1e6)
    return statistics.median(times)


def measure() -> dict[str, dict[str, float]]:
    """Per function (its ``functions/<name>``), seconds to import its entry point on the built layer and in the
    development venv."""
    built = built_functions(template_runtime(), MACHINE_ARCHITECTURE)
    layer_env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(layer_dir(built, MACHINE_ARCHITECTURE) / "python"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_REGION": "us-east-1",
    }
    # bytecode written and then cached, as in a developer's venv (a machine may set PYTHONDONTWRITEBYTECODE)
    dev_env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "AWS_REGION": "us-east-1"}
    root = Path(__file__).resolve().parents[1]
    results: dict[str, dict[str, float]] = {}
    with moto_server() as aws, tempfile.TemporaryDirectory() as logs:
        for code in sorted(d for d in built.iterdir() if (d / "app.py").is_file()):
            name = _handler_of(code)
            results[name] = {
                "layer_s": round(_import_s(str(LAMBDA_PYTHON), "app", code, layer_env), 3),
                "dev_s": round(_import_s(sys.executable, f"srm.handlers.{name}", root, dev_env), 3),
                **_in_rie(code, layer_dir(built, MACHINE_ARCHITECTURE), name, aws, Path(logs) / f"{name}.log"),
            }
    return results


_EVENTS = {"mirror": "msk_batch.json", "metrics_api": "api_gateway_metrics.json"}  # the rest: schedule.json


def _in_rie(code: Path, layer: Path, name: str, aws: str, log: Path) -> dict[str, float]:
    """RIE's Init Duration and the first and second invocation's Duration, in ms (see the module's docstring)."""
    env = {
        "SRM_SOURCE": "a",
        "SRM_TARGET": "b",
        "SRM_CONFIG_TABLE": "srm-config",
        "SRM_STATE_TABLE": "srm-state",
        "AWS_ENDPOINT_URL": aws,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    runtime = FunctionRuntime(code, layer, env, log).start()
    try:
        event = load_event(_EVENTS.get(name, "schedule.json"))
        for _ in range(2):
            runtime.invoke(event)
        inits, durations = runtime.init_durations_ms(), runtime.durations_ms()
    finally:
        runtime.stop()
    if len(durations) < 2:
        raise RuntimeError(f"{name}: RIE reported {len(durations)} invocation(s): {log.read_text()[-500:]}")
    return {"rie_init_ms": inits[0] if inits else 0.0, "first_ms": durations[0], "warm_ms": durations[1]}


def _handler_of(code: Path) -> str:
    """The ``srm.handlers`` module a built function's entry point re-exports (its ``functions/<name>``)."""
    match = re.search(r"^from srm\.handlers\.(\w+) import", (code / "app.py").read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{code / 'app.py'} does not re-export an srm handler")
    return match[1]


def table(results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"cold start: import of each function's entry point (goal ≤ {GOAL_S:g} s), and the function in RIE "
        "(Init Duration as RIE reports it; first and warm invocation)"
    ]
    lines.append(
        f"  {'function':<12} {'layer, as Lambda':>17} {'dev venv':>9} {'RIE init':>9} {'1st inv.':>9} {'warm':>8}"
    )
    for name, cell in results.items():
        over = "  > goal" if cell["layer_s"] > GOAL_S else ""
        rie = (
            f" {cell['rie_init_ms']:>7.2f}ms {cell['first_ms']:>7.0f}ms {cell['warm_ms']:>6.0f}ms"
            if "first_ms" in cell
            else ""
        )
        lines.append(f"  {name:<12} {cell['layer_s']:>16.2f}s {cell['dev_s']:>8.2f}s{rie}{over}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure()))
