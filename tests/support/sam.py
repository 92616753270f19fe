"""``sam build`` of template.yaml as a user runs it before ``sam deploy``: the SAM CLI of ``.venv-sam`` with the
functions' Python on PATH (its pip resolves the layer's wheels for that Python and the chosen architecture)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["MACHINE_ARCHITECTURE", "ROOT", "SAM", "TEMPLATE", "layer_dir", "python_of", "sam_build"]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM = ROOT / ".venv-sam" / "bin" / "sam"
# Lambda's name for this machine's CPU: a build for it runs here
MACHINE_ARCHITECTURE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}[
    platform.machine().lower()
]


def layer_dir(build_dir: Path, architecture: str) -> Path:
    """Where ``sam build`` put the layer of ``architecture`` (one layer resource per architecture)."""
    return build_dir / {"arm64": "SrmLayerArm64", "x86_64": "SrmLayerX8664"}[architecture]


def python_of(runtime: str) -> str:
    """The folder of the ``python3.x`` that ``runtime`` names (SAM builds with the runtime's own Python)."""
    version = runtime.removeprefix("python")
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python*")),
    ]
    for found in candidates:  # a pyenv shim may be on PATH without that version behind it
        if (
            found
            and Path(found).name == f"python{version}"
            and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0
        ):
            return str(Path(found).parent)
    raise AssertionError(f"sam build needs python{version} (the functions' runtime); `make install` says how")


def sam_build(
    build_dir: Path, runtime: str, *, architecture: str | None = None, cache_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``sam build`` into ``build_dir``; ``architecture`` overrides the template's Architecture parameter."""
    assert SAM.exists(), "SAM CLI is installed by `make install` into .venv-sam"
    env = {**os.environ, "PATH": f"{python_of(runtime)}:{os.environ['PATH']}", "SAM_CLI_TELEMETRY": "0"}
    command = [str(SAM), "build", "--template-file", str(TEMPLATE), "--build-dir", str(build_dir)]
    if cache_dir is not None:
        command += ["--cached", "--cache-dir", str(cache_dir)]
    if architecture is not None:
        command += ["--parameter-overrides", f"Architecture={architecture}"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
