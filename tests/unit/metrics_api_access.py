"""How the metrics API tests reach the API beyond its handler: the committed OpenAPI spec, and ``srm metrics``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["SPEC", "srm_metrics"]

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "metrics-api.json"


def srm_metrics(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "srm.cli.srm", "metrics", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )
