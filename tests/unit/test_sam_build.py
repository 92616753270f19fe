"""``sam build`` of template.yaml, as a user runs it before ``sam deploy``: the functions' runtime must take the
layer's wheels (confluent-kafka ships manylinux_2_28 wheels only, which Amazon Linux 2 runtimes cannot load)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.unit.sam_templates import ROOT, TEMPLATE

SAM = ROOT / ".venv-sam" / "bin" / "sam"


def _python_of(runtime: str) -> str:
    version = runtime.removeprefix("python")
    candidates = [
        shutil.which(f"python{version}"),
        *sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python*")),
    ]
    for found in candidates:  # a pyenv shim may be on PATH without that version behind it
        if found and Path(found).name == f"python{version}" and subprocess.run([found, "-c", ""]).returncode == 0:
            return str(Path(found).parent)
    raise AssertionError(f"sam build needs python{version} (the functions' runtime); `make install` says how")


def test_sam_build_packages_the_layer_for_the_functions_runtime_and_architecture(tmp_path: Path) -> None:
    assert SAM.exists(), "SAM CLI is installed by `make install` into .venv-sam"
    template = yaml.load(TEMPLATE.read_text(), Loader=yaml.BaseLoader)  # CloudFormation tags read as plain values
    runtime = template["Globals"]["Function"]["Runtime"]
    [architecture] = template["Globals"]["Function"]["Architectures"]
    assert runtime in ("python3.12", "python3.13"), "Lambda's Amazon Linux 2023 runtimes load the layer's wheels"
    build = tmp_path / "build"
    env = {**os.environ, "PATH": f"{_python_of(runtime)}:{os.environ['PATH']}", "SAM_CLI_TELEMETRY": "0"}
    done = subprocess.run(
        [
            str(SAM),
            "build",
            "--template-file",
            str(TEMPLATE),
            "--build-dir",
            str(build),
            "--cached",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    layer = build / "SrmLayer" / "python"
    machine = {"arm64": "aarch64", "x86_64": "x86_64"}[architecture]
    tag = runtime.removeprefix("python").replace(".", "")
    # the native parts are built for the functions' Python and CPU …
    assert list(layer.glob(f"confluent_kafka/cimpl.cpython-{tag}-{machine}-linux-gnu.so"))
    assert list(layer.glob(f"pydantic_core/_pydantic_core.cpython-{tag}-{machine}-linux-gnu.so"))
    # … the srm package rides in the layer, and every function's handler module is there
    assert (layer / "srm" / "handlers" / "mirror.py").exists()
    built = yaml.load((build / "template.yaml").read_text(), Loader=yaml.BaseLoader)
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert (build / name / "app.py").exists(), name
            assert built["Resources"][name]["Properties"]["CodeUri"] == name
