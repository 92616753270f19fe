"""The two SAM templates as the ``test_template*`` modules read them: loaded as plain JSON data, and the ways into
their functions, resources and IAM statements (the fixtures that load them are in conftest.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cfnlint.decode import cfn_yaml

__all__ = [
    "LAYERS",
    "MONITORING",
    "PARAMETERS",
    "ROOT",
    "TEMPLATE",
    "as_list",
    "deployed_name",
    "functions",
    "kafka_grants",
    "layer_ids",
    "load_template",
    "resources_of",
    "role_statements",
    "statements",
    "sub_text",
]

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
MONITORING = ROOT / "template-monitoring.yaml"

PARAMETERS = {
    "SourceAlias": "us-west",
    "TargetAlias": "us-east",
    "SourceClusterArn": "arn:aws:kafka:us-west-2:111122223333:cluster/us-west/5f2a8c1e-3d4b-4a6f-9c0e-7b1d2e3f4a5b-3",
    "TargetClusterArn": "arn:aws:kafka:us-east-1:111122223333:cluster/us-east/0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f-2",
}


def load_template(path: Path) -> dict[str, Any]:
    # cfn-lint's loader understands the short intrinsic tags (!Ref, !Sub…) and returns plain JSON data.
    return json.loads(json.dumps(cfn_yaml.load(str(path))))


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


def deployed_name(function: dict[str, Any]) -> str:
    """``functions/<name>/`` → ``<name>``."""
    m = re.fullmatch(r"functions/([a-z_][a-z0-9_]*)/?", function["Properties"]["CodeUri"])
    assert m, f"CodeUri {function['Properties']['CodeUri']!r} is not functions/<name>/"
    return m[1]


def resources_of(translated: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in translated["Resources"].items() if r["Type"] == type_}


# The layer's resource per architecture (SAM tells a makefile build only the logical id); one is created
LAYERS = {"arm64": "SrmLayerArm64", "x86_64": "SrmLayerX8664"}


def layer_ids(translated: dict[str, Any]) -> dict[str, str]:
    """The translated layer resources' logical ids (SAM appends a hash) by architecture."""
    found = resources_of(translated, "AWS::Lambda::LayerVersion")
    return {arch: next(k for k in found if k.startswith(name)) for arch, name in LAYERS.items()}


def statements(document: Any) -> Iterator[dict[str, Any]]:
    """Every statement of a policy document, with both branches of a conditional (``Fn::If``) statement."""
    pending = list(document["Statement"]) if isinstance(document["Statement"], list) else [document["Statement"]]
    while pending:
        s = pending.pop()
        if isinstance(s, dict) and "Fn::If" in s:
            pending.extend(b for b in s["Fn::If"][1:] if b != {"Ref": "AWS::NoValue"})
        else:
            yield s


def role_statements(translated: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for role_id, role in resources_of(translated, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for s in statements(policy["PolicyDocument"]):
                yield role_id, s


def kafka_grants(translated: dict[str, Any], role_id: str) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for r, s in role_statements(translated) if r == role_id and "Sid" in s}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def sub_text(resource: Any) -> str:
    return resource["Fn::Sub"][0] if isinstance(resource["Fn::Sub"], list) else resource["Fn::Sub"]
