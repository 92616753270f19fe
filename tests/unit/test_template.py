"""``template.yaml``, checked offline: cfn-lint, the SAM transform, handler wiring, parameters and the samconfig
files (least privilege: test_template_iam.py; secure defaults: test_template_hardening.py; the monitoring stack,
dashboard and alarms: test_template_monitoring.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import lint, lint_file
from cfnlint.config import ManualArgs
from moto import mock_aws

import srm.handlers
from srm.app import Environment
from srm.aws.config_table import create_config_table
from srm.aws.state import create_state_table
from srm.config.settings import FlowSettings
from srm.errors import ConfigError
from tests.unit.sam_templates import LAYERS, ROOT, TEMPLATE, deployed_name, functions, layer_ids, resources_of

TableCreator = Callable[[Any, str], None]


def test_template_passes_cfn_lint_without_errors_or_warnings() -> None:
    # GIVEN the template WHEN cfn-lint checks it in the regions the example flows use
    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1", "us-west-2"]))
    # THEN nothing is reported (no warning is filtered either)
    assert [str(m) for m in matches] == []


def test_translated_template_passes_cfn_lint(translated: dict[str, Any]) -> None:
    # cfn-lint checks IAM action names (W3037) only on AWS::IAM::Role, i.e. after the transform.
    matches = lint(json.dumps(translated), config=ManualArgs(regions=["us-west-2"]))
    # The one filtered warning is an artifact of translating offline: the translator substitutes the parameter
    # values into the layer's LayerName and leaves an Fn::Sub without variables (W1020) that CloudFormation accepts.
    layers = set(layer_ids(translated).values())
    reported = [
        str(m)
        for m in matches
        if not (m.rule.id == "W1020" and m.path[0] == "Resources" and m.path[1] in layers and "LayerName" in m.path)
    ]
    assert reported == []


def test_transform_yields_functions_layer_tables_and_schedule(
    template: dict[str, Any], translated: dict[str, Any]
) -> None:
    lambdas = resources_of(translated, "AWS::Lambda::Function")
    assert set(lambdas) == set(functions(template)) >= {"MirrorFunction", "TopicSyncFunction"}
    layers = layer_ids(translated)
    assert translated["Resources"][layers["arm64"]]["Condition"] == "IsArm64"
    assert translated["Resources"][layers["x86_64"]]["Condition"] == "IsX8664"
    layer_ref = {"Fn::If": ["IsArm64", {"Ref": layers["arm64"]}, {"Ref": layers["x86_64"]}]}
    for fn in lambdas.values():
        assert fn["Properties"]["Layers"] == [layer_ref]
        assert fn["Properties"]["Runtime"] == "python3.12"
    assert set(resources_of(translated, "AWS::DynamoDB::Table")) == {"ConfigTable", "StateTable"}
    schedules = {
        rule["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0]: rule["Properties"]["ScheduleExpression"]
        for rule in resources_of(translated, "AWS::Events::Rule").values()
    }
    assert schedules["TopicSyncFunction"] == {"Ref": "TopicSyncSchedule"}
    assert schedules["HeartbeatFunction"] == {"Ref": "HeartbeatSchedule"}
    assert "MirrorFunction" not in schedules


def test_mirror_has_no_event_source_mapping_in_the_stack(translated: dict[str, Any]) -> None:
    # an MSK mapping takes one topic: the topic-sync function creates them at run time
    assert resources_of(translated, "AWS::Lambda::EventSourceMapping") == {}


def test_every_function_gets_the_flow_environment(translated: dict[str, Any]) -> None:
    for name, fn in resources_of(translated, "AWS::Lambda::Function").items():
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["SRM_SOURCE"] == {"Ref": "SourceAlias"}, name
        assert env["SRM_TARGET"] == {"Ref": "TargetAlias"}, name
        assert env["SRM_CONFIG_TABLE"] == {"Ref": "ConfigTableName"}, name
        assert env["SRM_STATE_TABLE"] == {"Ref": "StateTableName"}, name
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "ServerlessSRM", name
        assert {"POWERTOOLS_SERVICE_NAME", "LOG_LEVEL"} <= set(env), name


def test_parameter_defaults_match_srm_defaults(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    defaults = Environment(source=None, target=None)
    assert params["ConfigTableName"]["Default"] == defaults.config_table
    assert params["StateTableName"]["Default"] == defaults.state_table
    m = re.fullmatch(r"rate\((\d+) minutes\)", params["TopicSyncSchedule"]["Default"])
    assert m and int(m[1]) * 60 == FlowSettings.model_fields["refresh_topics_interval_seconds"].default
    assert params["HeartbeatSchedule"]["Default"] == "rate(1 minute)"  # EventBridge's finest; MM2 emits every 1 s


@pytest.mark.parametrize(
    ("table", "create"), [("ConfigTable", create_config_table), ("StateTable", create_state_table)]
)
def test_table_keys_match_what_srm_creates(template: dict[str, Any], table: str, create: TableCreator) -> None:
    # GIVEN the table srm creates for itself in the local runtime WHEN compared with the template's THEN same keys
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create(client, "t")
        described = client.describe_table(TableName="t")["Table"]
    props = template["Resources"][table]["Properties"]
    assert props["KeySchema"] == described["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(described["AttributeDefinitions"], key=str)
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


def test_every_function_handler_is_its_srm_handler(template: dict[str, Any]) -> None:
    for logical_id, fn in functions(template).items():
        name = deployed_name(fn)
        module_name, _, attr = fn["Properties"]["Handler"].rpartition(".")
        path = ROOT / fn["Properties"]["CodeUri"] / f"{module_name.replace('.', '/')}.py"
        spec = importlib.util.spec_from_file_location(f"_deployed_{name}_{module_name}", path)
        assert spec and spec.loader, f"{logical_id}: {path} does not exist"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        expected = importlib.import_module(f"srm.handlers.{name}").lambda_handler
        assert getattr(module, attr) is expected, f"{logical_id}: {path}:{attr} is not srm.handlers.{name}.{attr}"
        layers = [{"Fn::If": ["IsArm64", *({"Ref": n} for n in LAYERS.values())]}]
        assert fn["Properties"]["Layers"] == layers, logical_id


def test_layer_ships_the_srm_package_built_by_its_makefile_per_architecture(template: dict[str, Any]) -> None:
    assert template["Parameters"]["Architecture"]["AllowedValues"] == list(LAYERS)
    for architecture, logical_id in LAYERS.items():
        layer = template["Resources"][logical_id]
        content = ROOT / layer["Properties"]["ContentUri"]
        assert (content / "srm" / "handlers" / "__init__.py").is_file()
        assert (content / "requirements.txt").is_file()
        assert f"build-{logical_id}" in (content / "Makefile").read_text()
        assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": architecture}
        assert layer["Properties"]["CompatibleArchitectures"] == [architecture]
        assert layer["Properties"]["CompatibleRuntimes"] == [template["Globals"]["Function"]["Runtime"]]
        condition = template["Conditions"][layer["Condition"]]
        assert condition == {"Fn::Equals": [{"Ref": "Architecture"}, architecture]}


# What Lambda never runs stays out of the layer: the local runtime and its launchers, the CLIs, the Spark job and the
# dashboard generator. The layer's tree links everything else of srm, each link to its namesake in layers/core.
NOT_SHIPPED = {"local", "cli", "metrics/aggregate.py", "metrics/runner.py", "metrics/dashboard.py"}


def test_layer_tree_links_every_part_of_srm_lambda_runs(template: dict[str, Any]) -> None:
    shipped = ROOT / template["Resources"][LAYERS["arm64"]]["Properties"]["ContentUri"] / "srm"
    core = ROOT / "layers" / "core" / "srm"

    def entries(folder: Path) -> set[str]:
        return {p.name for p in folder.iterdir() if p.name != "__pycache__"}

    for sub in ("", "metrics"):
        expected = {n for n in entries(core / sub) if str(Path(sub) / n) not in NOT_SHIPPED}
        assert entries(shipped / sub) == expected, f"layers/lambda/srm/{sub}: link what Lambda runs, nothing else"
    links = [p for p in shipped.rglob("*") if p.is_symlink()]
    assert links and all(p.resolve() == core / p.relative_to(shipped) for p in links)


def test_every_srm_handler_module_is_deployed(template: dict[str, Any]) -> None:
    handlers = {m.name for m in pkgutil.iter_modules(srm.handlers.__path__)}
    deployed = {deployed_name(fn) for fn in functions(template).values()}
    assert handlers == deployed, f"undeployed handlers: {handlers - deployed}; unknown: {deployed - handlers}"


def test_source_auth_offers_what_lambda_takes_for_msk_and_needs_a_secret(template: dict[str, Any]) -> None:
    allowed = template["Parameters"]["SourceAuth"]["AllowedValues"]
    assert allowed == ["IAM", "SASL_SCRAM_512_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH"]
    rule = template["Rules"]["SecretWithSourceAuth"]
    assert rule["RuleCondition"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "SourceAuth"}, "IAM"]}]}
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "SourceSecretArn"}, ""]}]}
    with pytest.raises(ConfigError, match="SASL_SCRAM_512_AUTH, CLIENT_CERTIFICATE_TLS_AUTH"):
        Environment.from_env({"SRM_SOURCE_AUTH": "SASL_SCRAM_256_AUTH", "SRM_SOURCE_SECRET_ARN": "arn:x"})


def test_no_select_can_fail_on_an_empty_target_cluster_arn(template: dict[str, Any]) -> None:
    # CloudFormation evaluates Fn::Select in both branches of Fn::If: splitting an empty TargetClusterArn must still
    # yield two elements, so the target's ARN is always split with ":cluster/" appended.
    def selects(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            if "Fn::Select" in node:
                yield node["Fn::Select"][1]
            for value in node.values():
                yield from selects(value)
        elif isinstance(node, list):
            for value in node:
                yield from selects(value)

    split_target = [s for s in selects(template["Resources"]) if "TargetClusterArn" in json.dumps(s)]
    assert split_target
    for split in split_target:
        assert split == {"Fn::Split": [":cluster/", {"Fn::Join": ["", [{"Ref": "TargetClusterArn"}, ":cluster/"]]}]}, (
            split
        )


@pytest.mark.parametrize("samconfig", sorted((ROOT / "infra").glob("samconfig.*.toml")), ids=lambda p: p.name)
def test_samconfig_parameters_are_the_templates_and_valid(
    samconfig: Path, template: dict[str, Any], monitoring: dict[str, Any]
) -> None:
    import shlex
    import tomllib

    deploy = tomllib.loads(samconfig.read_text())["default"]["deploy"]["parameters"]
    target = monitoring if deploy.get("template_file") == "template-monitoring.yaml" else template
    values = dict(kv.split("=", 1) for entry in deploy["parameter_overrides"] for kv in shlex.split(entry))
    params = target["Parameters"]
    assert set(values) <= set(params), set(values) - set(params)
    assert {k for k, p in params.items() if "Default" not in p} <= set(values)  # the required ones
    for key, value in values.items():
        spec = params[key]
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], value), (key, value)
        if "AllowedValues" in spec:
            assert value in [str(v) for v in spec["AllowedValues"]], (key, value)
    if target is template:  # the flow runs in its source cluster's region
        region = tomllib.loads(samconfig.read_text())["default"]["global"]["parameters"]["region"]
        assert values["SourceClusterArn"].split(":")[3] == region
        assert values["TargetClusterArn"].split(":")[3] == values.get("TargetSecretsRegion", region)
