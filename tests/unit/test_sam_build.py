"""``sam build`` of template.yaml, as a user runs it before ``sam deploy``: the functions' runtime must take the
layer's wheels (confluent-kafka ships manylinux_2_28 wheels only, which Amazon Linux 2 runtimes cannot load)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.sam import TEMPLATE, layer_dir, sam_build


def test_sam_build_packages_the_layer_for_the_functions_runtime_and_architecture(tmp_path: Path) -> None:
    template = yaml.load(TEMPLATE.read_text(), Loader=yaml.BaseLoader)  # CloudFormation tags read as plain values
    runtime = template["Globals"]["Function"]["Runtime"]
    architecture = template["Parameters"]["Architecture"]["Default"]  # what a plain `sam build` builds for
    assert runtime in ("python3.12", "python3.13"), "Lambda's Amazon Linux 2023 runtimes load the layer's wheels"
    build = tmp_path / "build"
    done = sam_build(build, runtime, cache_dir=tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    layer = layer_dir(build, architecture) / "python"
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
