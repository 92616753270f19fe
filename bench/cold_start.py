"""``make bench``'s cold start, per function: what its first invocation pays before the handler runs — the imports of
its entry point, as ``python -X importtime`` reports them (median of three fresh processes):

* ``layer_s``: the ``sam build`` output as Lambda runs it — the runtime's Python with only what Lambda's runtime
  brings (``.venv-lambda``), the built layer as ``/opt/python`` with the bytecode it ships, none written (Lambda's
  ``/opt`` and ``/var/task`` are read-only);
* ``dev_s``: the same handler's import in the development venv, bytecode cached.

The Runtime Interface Emulator's ``Init Duration`` is not used: it reports microseconds, as it does not wait for the
runtime client's first poll; tests/lambda sees the first invocation's ``Duration`` carry the imports instead."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from tests.support.lambda_runtime import PYTHON as LAMBDA_PYTHON
from tests.support.lambda_runtime import built_functions, template_runtime
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
    for code in sorted(d for d in built.iterdir() if (d / "app.py").is_file()):
        name = _handler_of(code)
        results[name] = {
            "layer_s": round(_import_s(str(LAMBDA_PYTHON), "app", code, layer_env), 3),
            "dev_s": round(_import_s(sys.executable, f"srm.handlers.{name}", root, dev_env), 3),
        }
    return results


def _handler_of(code: Path) -> str:
    """The ``srm.handlers`` module a built function's entry point re-exports (its ``functions/<name>``)."""
    match = re.search(r"^from srm\.handlers\.(\w+) import", (code / "app.py").read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{code / 'app.py'} does not re-export an srm handler")
    return match[1]


def table(results: dict[str, dict[str, float]]) -> str:
    lines = [f"cold start: import of each function's entry point (goal ≤ {GOAL_S:g} s)"]
    lines.append(f"  {'function':<12} {'layer, as Lambda':>17} {'dev venv':>9}")
    for name, cell in results.items():
        over = "  > goal" if cell["layer_s"] > GOAL_S else ""
        lines.append(f"  {name:<12} {cell['layer_s']:>16.2f}s {cell['dev_s']:>8.2f}s{over}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure()))
