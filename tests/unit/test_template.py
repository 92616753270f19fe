"""``template.yaml``, checked offline: cfn-lint, the SAM transform, handler wiring and least privilege."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import re
import runpy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import lint, lint_file
from cfnlint.config import ManualArgs
from cfnlint.decode import cfn_yaml
from moto import mock_aws

import srm.handlers
from srm.app import Environment
from srm.aws.config_table import create_config_table
from srm.aws.state import create_state_table
from srm.config.settings import FlowSettings
from srm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

PARAMETERS = {
    "SourceAlias": "us-west",
    "TargetAlias": "us-east",
    "SourceClusterArn": "arn:aws:kafka:us-west-2:111122223333:cluster/us-west/5f2a8c1e-3d4b-4a6f-9c0e-7b1d2e3f4a5b-3",
    "TargetClusterArn": "arn:aws:kafka:us-east-1:111122223333:cluster/us-east/0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f-2",
}

# Write actions a statement may grant on Resource "*": AWS offers no resource to scope them to.
UNSCOPABLE = {
    # CreateEventSourceMapping takes no resource ARN; the statement is limited to mappings that invoke the mirror
    # function by the lambda:FunctionArn condition (test_create_event_source_mapping_is_limited_to_the_mirror).
    "lambda:CreateEventSourceMapping",
    # The MSK event source mapping's pollers attach ENIs to the cluster's subnets (AWSLambdaMSKExecutionRole);
    # the interfaces do not exist before, so there is nothing to name.
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
}
READ_ONLY_VERBS = ("Describe", "Get", "List", "BatchGet")


TableCreator = Callable[[Any, str], None]


class OfflinePolicyLoader:
    """The SAM translator asks IAM for managed policy ARNs only to resolve policies named in a template; ours names
    none, so an empty map is the whole answer and nothing reaches AWS."""

    def load(self) -> dict[str, str]:
        return {}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    # cfn-lint's loader understands the short intrinsic tags (!Ref, !Sub…) and returns plain JSON data.
    return json.loads(json.dumps(cfn_yaml.load(str(TEMPLATE))))


@pytest.fixture(scope="module")
def translated(template: dict[str, Any]) -> dict[str, Any]:
    transform = pytest.importorskip(
        "samtranslator.translator.transform", reason="the SAM transform needs aws-sam-translator (dev dependency)"
    ).transform

    packaged = json.loads(json.dumps(template))
    for resource in packaged["Resources"].values():  # what `sam package` does: local folders become S3 objects
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://artifacts/{props[key].strip('/')}.zip"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-west-2")  # the translator needs a region, never a credential
        return transform(packaged, dict(PARAMETERS), OfflinePolicyLoader())


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


def deployed_name(function: dict[str, Any]) -> str:
    """``functions/<name>/`` → ``<name>``."""
    m = re.fullmatch(r"functions/([a-z_][a-z0-9_]*)/?", function["Properties"]["CodeUri"])
    assert m, f"CodeUri {function['Properties']['CodeUri']!r} is not functions/<name>/"
    return m[1]


def layer_id(translated: dict[str, Any]) -> str:
    (logical_id,) = resources_of(translated, "AWS::Lambda::LayerVersion")
    return logical_id


def resources_of(translated: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in translated["Resources"].items() if r["Type"] == type_}


# -- (a) cfn-lint -------------------------------------------------------------------------------------------------
def test_template_passes_cfn_lint_without_errors_or_warnings() -> None:
    # GIVEN the template WHEN cfn-lint checks it in the regions the example flows use
    matches = lint_file(TEMPLATE, config=ManualArgs(regions=["us-east-1", "us-west-2"]))
    # THEN nothing is reported (no warning is filtered either)
    assert [str(m) for m in matches] == []


# -- (b) the SAM transform ----------------------------------------------------------------------------------------
def test_translated_template_passes_cfn_lint(translated: dict[str, Any]) -> None:
    # cfn-lint checks IAM action names (W3037) only on AWS::IAM::Role, i.e. after the transform.
    matches = lint(json.dumps(translated), config=ManualArgs(regions=["us-west-2"]))
    # The one filtered warning is an artifact of translating offline: the translator substitutes the parameter
    # values into the layer's LayerName and leaves an Fn::Sub without variables (W1020) that CloudFormation accepts.
    reported = [
        str(m)
        for m in matches
        if not (m.rule.id == "W1020" and m.path[:2] == ["Resources", layer_id(translated)] and "LayerName" in m.path)
    ]
    assert reported == []


def test_transform_yields_functions_layer_tables_and_schedule(
    template: dict[str, Any], translated: dict[str, Any]
) -> None:
    lambdas = resources_of(translated, "AWS::Lambda::Function")
    assert set(lambdas) == set(functions(template)) >= {"MirrorFunction", "TopicSyncFunction"}
    layer_ref = {"Ref": layer_id(translated)}
    assert layer_ref["Ref"].startswith("SrmLayer")
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


# -- (c) handlers resolve to srm.handlers ---------------------------------------------------------------------------
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
        assert fn["Properties"]["Layers"] == [{"Ref": "SrmLayer"}], logical_id


def test_layer_ships_the_srm_package(template: dict[str, Any]) -> None:
    layer = template["Resources"]["SrmLayer"]
    content = ROOT / layer["Properties"]["ContentUri"]
    assert (content / "srm" / "handlers" / "__init__.py").is_file()
    assert (content / "requirements.txt").is_file()
    assert layer["Metadata"]["BuildMethod"] == template["Globals"]["Function"]["Runtime"]
    assert layer["Properties"]["CompatibleArchitectures"] == template["Globals"]["Function"]["Architectures"]
    assert [layer["Metadata"]["BuildArchitecture"]] == template["Globals"]["Function"]["Architectures"]


# -- (d) nothing left undeployed ----------------------------------------------------------------------------------
def test_every_srm_handler_module_is_deployed(template: dict[str, Any]) -> None:
    handlers = {m.name for m in pkgutil.iter_modules(srm.handlers.__path__)}
    deployed = {deployed_name(fn) for fn in functions(template).values()}
    assert handlers == deployed, f"undeployed handlers: {handlers - deployed}; unknown: {deployed - handlers}"


# -- (e) least privilege ------------------------------------------------------------------------------------------
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


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def is_read_only(action: str) -> bool:
    return action.split(":", 1)[1].startswith(READ_ONLY_VERBS)


def test_no_statement_grants_wildcard_actions_or_unscoped_writes(translated: dict[str, Any]) -> None:
    checked = 0
    for role_id, s in role_statements(translated):
        checked += 1
        assert s["Effect"] == "Allow" and "NotAction" not in s and "NotResource" not in s, (role_id, s)
        actions = as_list(s["Action"])
        assert all(isinstance(a, str) and "*" not in a for a in actions), (role_id, s)
        if "*" in as_list(s["Resource"]):
            writes = {a for a in actions if not is_read_only(a)}
            assert writes <= UNSCOPABLE, f"{role_id} {s.get('Sid')}: {sorted(writes - UNSCOPABLE)} on Resource '*'"
    assert checked > 10


def test_create_event_source_mapping_is_limited_to_the_mirror(translated: dict[str, Any]) -> None:
    grants = [
        (r, s) for r, s in role_statements(translated) if "lambda:CreateEventSourceMapping" in as_list(s["Action"])
    ]
    assert [r for r, _ in grants] == ["TopicSyncFunctionRole"]
    condition = grants[0][1]["Condition"]["ArnLike"]["lambda:FunctionArn"]
    assert {"Fn::GetAtt": ["MirrorFunction", "Arn"]} in condition


def test_only_the_vpc_policy_is_attached_and_only_in_a_vpc(translated: dict[str, Any]) -> None:
    # GIVEN every function's role WHEN its managed policies are read THEN AWS's VPC access policy is the only one,
    # attached only with VpcSubnetIds; logs go to the function's own group through an inline statement
    vpc = {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"}
    roles = resources_of(translated, "AWS::IAM::Role")
    assert set(roles) == {f"{f}Role" for f in resources_of(translated, "AWS::Lambda::Function")}
    for role_id, role in roles.items():
        assert role["Properties"]["ManagedPolicyArns"] == {"Fn::If": ["InVpc", [vpc], {"Ref": "AWS::NoValue"}]}
        logs = [s for _, s in role_statements({"Resources": {role_id: role}}) if s.get("Sid") == "Logs"]
        function = role_id.removesuffix("Role")
        assert logs == [
            {
                "Sid": "Logs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": {"Fn::GetAtt": [function.removesuffix("Function") + "LogGroup", "Arn"]},
            }
        ], role_id
        lambda_fn = translated["Resources"][function]["Properties"]
        assert lambda_fn["Role"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_secrets_are_scoped_to_the_prefix(translated: dict[str, Any]) -> None:
    # GIVEN every grant of secrets WHEN its resources are read (both of TargetSecretsRegion's branches) THEN each
    # is a secret named <prefix>* or AmazonMSK_<prefix>*, of the stack's region or TargetSecretsRegion
    granted = set()
    for role_id, s in role_statements(translated):
        if "secretsmanager:GetSecretValue" in as_list(s["Action"]):
            granted.add(role_id)
            for resource in as_list(s["Resource"]):
                if "Fn::If" in resource:
                    condition, resource, otherwise = resource["Fn::If"]
                    assert (condition, otherwise) == ("HasTargetSecretsRegion", {"Ref": "AWS::NoValue"}), role_id
                    assert ":secretsmanager:${TargetSecretsRegion}:" in resource["Fn::Sub"], role_id
                else:
                    assert ":secretsmanager:${AWS::Region}:" in resource["Fn::Sub"], role_id
                assert resource["Fn::Sub"].endswith(
                    ("secret:${SecretNamePrefix}*", "secret:AmazonMSK_${SecretNamePrefix}*")
                ), role_id
    assert len(granted) == 5  # every function, each reaches Kafka


def test_heartbeat_function_writes_only_the_source_heartbeats_topic(translated: dict[str, Any]) -> None:
    # GIVEN the heartbeat function's role WHEN its statements are read THEN it reads the config table, writes no
    # table, touches no Lambda resource, and creates and writes only the source's heartbeats topic
    grants = [s for r, s in role_statements(translated) if r == "HeartbeatFunctionRole"]
    actions = {a for s in grants for a in as_list(s["Action"])}
    assert not {a for a in actions if a.startswith("lambda:")}
    writes_verbs = ("Put", "Update", "Delete", "BatchWrite", "Create", "Tag")
    assert not {a for a in actions if a.startswith("dynamodb:") and a.split(":", 1)[1].startswith(writes_verbs)}
    writes = [s for s in grants if {"kafka-cluster:WriteData", "kafka-cluster:CreateTopic"} & set(as_list(s["Action"]))]
    assert [s["Sid"] for s in writes] == ["SourceHeartbeatsTopic"]
    assert writes[0]["Resource"]["Fn::Sub"][0].endswith(":topic/${Cluster}/heartbeats")


# -- (e) monitoring: one stack per region, shared by the flow stacks -------------------------------------------------
MONITORING = ROOT / "template-monitoring.yaml"


@pytest.fixture(scope="module")
def monitoring() -> dict[str, Any]:
    return json.loads(json.dumps(cfn_yaml.load(str(MONITORING))))


def test_monitoring_template_passes_cfn_lint_without_errors_or_warnings() -> None:
    matches = lint_file(MONITORING, config=ManualArgs(regions=["us-east-1", "us-west-2"]))
    assert not matches, "\n".join(str(m) for m in matches)


def test_raw_metrics_bucket_is_private_and_encrypted(monitoring: dict[str, Any]) -> None:
    props = monitoring["Resources"]["RawMetricsBucket"]["Properties"]
    assert all(props["PublicAccessBlockConfiguration"].values())
    encryption = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert encryption["SSEAlgorithm"] in ("AES256", "aws:kms")


def test_firehose_writes_the_partitioning_the_job_reads(monitoring: dict[str, Any]) -> None:
    from srm.metrics.sinks import raw_partition

    s3 = monitoring["Resources"]["RawMetricsStream"]["Properties"]["ExtendedS3DestinationConfiguration"]
    assert monitoring["Resources"]["RawMetricsStream"]["Properties"]["DeliveryStreamType"] == "DirectPut"
    args = monitoring["Resources"]["AggregateMetricsJob"]["Properties"]["DefaultArguments"]
    assert s3["Prefix"] == args["--raw_prefix"] + "dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/"
    assert raw_partition(0) == "dt=1970-01-01/hour=00"  # the local files' folders, the same partitioning
    assert s3["ErrorOutputPrefix"] and not s3["ErrorOutputPrefix"].startswith(args["--raw_prefix"])
    assert s3["BufferingHints"]["SizeInMBs"] == 16


def test_glue_job_is_glue_5_with_two_g1x_workers_every_5_minutes_and_the_scripts_arguments(
    monitoring: dict[str, Any],
) -> None:
    spec = importlib.util.spec_from_file_location("aggregate_metrics", ROOT / "glue_jobs" / "aggregate_metrics.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    job = monitoring["Resources"]["AggregateMetricsJob"]["Properties"]
    assert (job["GlueVersion"], job["WorkerType"], job["NumberOfWorkers"]) == ("5.0", "G.1X", 2)
    given = {k.removeprefix("--") for k in job["DefaultArguments"]}
    assert set(script.ARGUMENTS) - {"JOB_NAME"} <= given
    trigger = monitoring["Resources"]["AggregateMetricsSchedule"]["Properties"]
    assert trigger["Schedule"] == "cron(0/5 * * * ? *)" and trigger["Type"] == "SCHEDULED"


def test_metrics_table_keys_and_ttl_match_what_srm_creates(monitoring: dict[str, Any]) -> None:
    from srm.aws.metrics_table import TTL_ATTRIBUTE, create_metrics_table

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_metrics_table(client, "t")
        described = client.describe_table(TableName="t")["Table"]
    props = monitoring["Resources"]["MetricsTable"]["Properties"]
    assert props["KeySchema"] == described["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(described["AttributeDefinitions"], key=str)
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}


def test_functions_that_emit_raw_metrics_may_put_to_the_stream_only(translated: dict[str, Any]) -> None:
    emitting = {"srm-mirror", "srm-topic-sync", "srm-checkpoint"}
    found = set()
    for name, fn in resources_of(translated, "AWS::Lambda::Function").items():
        env = fn["Properties"]["Environment"]["Variables"]
        if env.get("POWERTOOLS_SERVICE_NAME") in emitting:
            assert env["SRM_METRICS_STREAM"] == {"Ref": "MetricsStreamName"}, name
            found.add(env["POWERTOOLS_SERVICE_NAME"])
    assert found == emitting
    grants = [s for _, s in role_statements(translated) if "firehose:PutRecordBatch" in as_list(s["Action"])]
    assert len(grants) == len(emitting)
    for statement in grants:
        assert as_list(statement["Action"]) == ["firehose:PutRecordBatch"]
        assert "deliverystream/${MetricsStreamName}" in json.dumps(statement["Resource"])


# -- (f) the flow's dashboard and alarms ------------------------------------------------------------------------------
def test_dashboard_body_is_the_one_srm_generates(template: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from srm.metrics import dashboard

    # GIVEN the template's dashboard WHEN compared with the code's definition THEN the very same text
    body = template["Resources"]["FlowDashboard"]["Properties"]["DashboardBody"]
    assert body == {"Fn::Sub": dashboard.body()}, "regenerate it: python -m srm.metrics.dashboard"
    runpy.run_path(dashboard.__file__, run_name="__main__")  # python -m srm.metrics.dashboard
    assert capsys.readouterr().out == dashboard.body()
    # AND its Lambda graphs cover every function of the stack, its alarm widget every alarm
    assert set(dashboard.FUNCTIONS) == set(functions(template))
    alarms = {k for k, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert set(dashboard.ALARMS) == alarms
    lambda_rows = [
        row
        for widget in json.loads(dashboard.body())["widgets"]
        for row in widget["properties"].get("metrics", [])
        if row[0] == "AWS/Lambda"
    ]
    assert {row[3] for row in lambda_rows} == {f"${{{f}}}" for f in dashboard.FUNCTIONS}


def test_srm_metrics_in_the_dashboard_and_alarms_are_the_flows(template: dict[str, Any]) -> None:
    from srm.metrics import dashboard

    for widget in json.loads(dashboard.body())["widgets"]:
        for row in widget["properties"].get("metrics", []):
            if row[0] == "ServerlessSRM":
                assert row[2:4] == ["Flow", dashboard.FLOW], row
    for alarm_id in dashboard.ALARMS:
        props = template["Resources"][alarm_id]["Properties"]
        if props["Namespace"] == "ServerlessSRM":
            assert props["Dimensions"] == [{"Name": "Flow", "Value": {"Fn::Sub": dashboard.FLOW}}], alarm_id
        else:
            assert props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "CheckpointFunction"}}], alarm_id


def test_alarms_notify_the_optional_topic_with_the_parameters_thresholds(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    action = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    alarms = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    for alarm_id, props in alarms.items():
        assert props["AlarmActions"] == props["OKActions"] == action, alarm_id
        assert props["ComparisonOperator"] == "GreaterThanThreshold", alarm_id
    lag, heartbeat = alarms["LagAlarm"], alarms["HeartbeatAgeAlarm"]
    assert (lag["MetricName"], lag["Threshold"], lag["EvaluationPeriods"]) == (
        "MessageLag",
        {"Ref": "LagAlarmThreshold"},
        {"Ref": "LagAlarmPeriods"},
    )
    # the end-to-end check: no heartbeat age reported at all is as bad as an old one
    assert (heartbeat["MetricName"], heartbeat["Threshold"], heartbeat["TreatMissingData"]) == (
        "HeartbeatAge",
        {"Ref": "HeartbeatAgeAlarmThresholdMs"},
        "breaching",
    )
    for alarm_id, metric in (
        ("FailedBatchesAlarm", "ReplicatorFailure"),
        ("CheckpointErrorsAlarm", "Errors"),
        ("DataLossAlarm", "LostOffsets"),  # any lost offset fires it
    ):
        props = alarms[alarm_id]
        assert (props["MetricName"], props["Statistic"], props["Threshold"]) == (metric, "Sum", 0), alarm_id
    # a count of mappings at each topic sync, not events: any run with one fires it, and it holds between runs
    problems = alarms["MappingProblemsAlarm"]
    assert (problems["MetricName"], problems["Statistic"], problems["Threshold"], problems["TreatMissingData"]) == (
        "MappingProblems",
        "Maximum",
        0,
        "ignore",
    )


def test_mapping_failures_go_where_topic_sync_points_the_mappings(translated: dict[str, Any]) -> None:
    # the destination topic sync gives the mappings is the one the mirror's role (theirs) may write to
    env = resources_of(translated, "AWS::Lambda::Function")["TopicSyncFunction"]["Properties"]["Environment"]
    destination = env["Variables"]["SRM_MAPPING_FAILURE_DESTINATION"]["Fn::If"]
    assert destination[0] == "HasMappingFailureDestination"
    mirror = [s for role, s in role_statements(translated) if role == "MirrorFunctionRole"]
    granted = [s["Resource"] for s in mirror if s.get("Sid") == "MappingFailures"]
    assert destination[1] in granted
    assert any(isinstance(r, list) and {"Fn::GetAtt": ["DeadLetterBucket", "Arn"]} in r for r in granted)


def test_source_auth_offers_what_lambda_takes_for_msk_and_needs_a_secret(template: dict[str, Any]) -> None:
    allowed = template["Parameters"]["SourceAuth"]["AllowedValues"]
    assert allowed == ["IAM", "SASL_SCRAM_512_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH"]
    rule = template["Rules"]["SecretWithSourceAuth"]
    assert rule["RuleCondition"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "SourceAuth"}, "IAM"]}]}
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "SourceSecretArn"}, ""]}]}
    with pytest.raises(ConfigError, match="SASL_SCRAM_512_AUTH, CLIENT_CERTIFICATE_TLS_AUTH"):
        Environment.from_env({"SRM_SOURCE_AUTH": "SASL_SCRAM_256_AUTH", "SRM_SOURCE_SECRET_ARN": "arn:x"})


def test_remote_querying_advertises_this_stacks_api_and_calls_only_the_named_peers(translated: dict[str, Any]) -> None:
    # GIVEN the translated stack WHEN topic sync's environment and the API function's role are read THEN topic sync
    # advertises this stack's API URL, and the API may invoke exactly the PeerApiArns (none by default)
    env = resources_of(translated, "AWS::Lambda::Function")["TopicSyncFunction"]["Properties"]["Environment"]
    assert env["Variables"]["SRM_API_URL"]["Fn::Sub"].startswith("https://${MetricsApi}.execute-api.")
    invokes = [(r, s) for r, s in role_statements(translated) if "execute-api:Invoke" in as_list(s["Action"])]
    assert [(r, s["Resource"]) for r, s in invokes] == [("MetricsApiFunctionRole", {"Ref": "PeerApiArns"})]
    adverts = [s for r, s in role_statements(translated) if s.get("Sid") == "TargetApiAdvert"]
    assert [r for r, s in role_statements(translated) if s.get("Sid") == "TargetApiAdvert"] == ["TopicSyncFunctionRole"]
    assert adverts[0]["Resource"][1]["Fn::Sub"][0].endswith(":topic/${Cluster}/srm-metrics-api.internal")


# -- (g) secure by default: encryption, backups, retention, TLS, concurrency, timeouts ---------------------------------
def kafka_grants(translated: dict[str, Any], role_id: str) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for r, s in role_statements(translated) if r == role_id and "Sid" in s}


def sub_text(resource: Any) -> str:
    return resource["Fn::Sub"][0] if isinstance(resource["Fn::Sub"], list) else resource["Fn::Sub"]


def test_shared_tables_are_encrypted_backed_up_and_protected(
    template: dict[str, Any], monitoring: dict[str, Any]
) -> None:
    for resources, table in ((template, "ConfigTable"), (template, "StateTable"), (monitoring, "MetricsTable")):
        resource = resources["Resources"][table]
        props = resource["Properties"]
        assert props["SSESpecification"] == {"SSEEnabled": True}, table
        # losing the state table's offset runs means re-reading records on failover
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, table
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain", table
    for resources, table in ((template, "ConfigTable"), (template, "StateTable"), (monitoring, "MetricsTable")):
        assert resources["Resources"][table]["Properties"]["DeletionProtectionEnabled"] is True, table  # shared


def test_every_function_logs_to_its_own_group_with_the_retention(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    groups = set()
    for name, fn in functions(template).items():
        group = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert resources[group]["Type"] == "AWS::Logs::LogGroup", name
        assert resources[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        assert resources[group]["Properties"]["LogGroupName"]["Fn::Sub"].startswith("/aws/lambda/srm-"), name
        groups.add(group)
    assert len(groups) == len(functions(template))
    access = resources["MetricsApiAccessLogs"]["Properties"]
    assert access["RetentionInDays"] == {"Ref": "LogRetentionDays"}


@pytest.mark.parametrize(("which", "bucket"), [("template", "DeadLetterBucket"), ("monitoring", "RawMetricsBucket")])
def test_buckets_are_private_encrypted_and_tls_only(
    template: dict[str, Any], monitoring: dict[str, Any], which: str, bucket: str
) -> None:
    resources = (template if which == "template" else monitoring)["Resources"]
    props = resources[bucket]["Properties"]
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True
    )
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}  # no ACLs
    encryption = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert encryption["SSEAlgorithm"] in ("AES256", "aws:kms")
    (policy,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    (deny,) = policy["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [{"Fn::GetAtt": [bucket, "Arn"]}, {"Fn::Sub": f"${{{bucket}.Arn}}/*"}]


def test_checkpoint_runs_never_overlap_and_heartbeats_outlive_their_delivery_timeout(template: dict[str, Any]) -> None:
    fns, params = functions(template), template["Parameters"]
    assert params["CheckpointSchedule"]["Default"] == "rate(1 minute)"
    assert fns["CheckpointFunction"]["Properties"]["Timeout"] < 60  # a run ends before the next one starts
    assert "ReservedConcurrentExecutions" not in fns["CheckpointFunction"]["Properties"]
    delivery_s = FlowSettings.model_fields["mirror_delivery_timeout_ms"].default / 1000
    assert fns["HeartbeatFunction"]["Properties"]["Timeout"] > delivery_s
    assert fns["MirrorFunction"]["Properties"]["Timeout"] > delivery_s
    m = re.fullmatch(r"rate\((\d+) minutes\)", params["TopicSyncSchedule"]["Default"])
    assert m and fns["TopicSyncFunction"]["Properties"]["Timeout"] < int(m[1]) * 60


def test_mirror_concurrency_is_reserved_unless_the_parameter_says_0(template: dict[str, Any]) -> None:
    props = functions(template)["MirrorFunction"]["Properties"]
    assert props["ReservedConcurrentExecutions"] == {
        "Fn::If": ["HasMirrorReservedConcurrency", {"Ref": "MirrorReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }
    assert template["Conditions"]["HasMirrorReservedConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "MirrorReservedConcurrency"}, 0]}]
    }
    param = template["Parameters"]["MirrorReservedConcurrency"]
    assert param["MinValue"] == 0 and param["Default"] > 0


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


def test_target_writes_are_limited_to_remote_and_internal_topics(translated: dict[str, Any]) -> None:
    # GIVEN every statement on the target WHEN its topic resources are read THEN create/alter/write/read reach only
    # the remote topics (RemoteTopicPattern, default <source>.*) and srm's own internal topics
    internal = {
        ":topic/${Cluster}/mm2-offsets.${SourceAlias}.internal",
        ":topic/${Cluster}/mm2-offset-syncs.${SourceAlias}.internal",
        ":topic/${Cluster}/${SourceAlias}.checkpoints.internal",
        ":topic/${Cluster}/srm-metrics-api.internal",
        ":topic/${Cluster}/${RemoteTopics}",
    }
    remote = {"Fn::If": ["HasRemoteTopicPattern", {"Ref": "RemoteTopicPattern"}, {"Fn::Sub": "${SourceAlias}.*"}]}
    changes = {"CreateTopic", "AlterTopic", "AlterTopicDynamicConfiguration", "WriteData", "ReadData", "DeleteTopic"}
    checked = 0
    for role_id, s in role_statements(translated):
        actions = {a.split(":", 1)[1] for a in as_list(s["Action"]) if a.startswith("kafka-cluster:")}
        for resource in as_list(s["Resource"]):
            if not (
                isinstance(resource, dict) and "Fn::Sub" in resource and "TargetClusterArn" in json.dumps(resource)
            ):
                continue
            text = sub_text(resource)
            if ":topic/" in text and actions & changes:
                checked += 1
                assert any(text.endswith(i) for i in internal), (role_id, s["Sid"], text)
                if text.endswith("${RemoteTopics}"):
                    assert resource["Fn::Sub"][1]["RemoteTopics"] == remote, (role_id, s["Sid"])
    assert checked >= 5


def test_alter_group_is_scoped_and_every_reader_may_alter_its_group(translated: dict[str, Any]) -> None:
    # MSK IAM pairs ReadData with AlterGroup on the reader's group: every role reading has one, and no role may
    # alter every group of a cluster except the checkpoint function through CheckpointGroups.
    for role_id in ("MirrorFunctionRole", "CheckpointFunctionRole", "MetricsApiFunctionRole"):
        grants = [s for r, s in role_statements(translated) if r == role_id]
        reads = [s for s in grants if "kafka-cluster:ReadData" in as_list(s["Action"])]
        alters = [s for s in grants if "kafka-cluster:AlterGroup" in as_list(s["Action"])]
        assert reads and alters, role_id
        for s in alters:
            text = sub_text(s["Resource"])
            assert not text.endswith(":group/${Cluster}/*") and not text.endswith("group/*/*/*"), (role_id, text)
    checkpoint = kafka_grants(translated, "CheckpointFunctionRole")
    assert sub_text(checkpoint["TargetGroupsSync"]["Resource"]).endswith(":group/${Cluster}/${CheckpointGroups}")
    assert sub_text(checkpoint["SourceProbeGroup"]["Resource"]).endswith(":group/${Cluster}/srm-checkpoint-probe")
    mirror = kafka_grants(translated, "MirrorFunctionRole")
    assert sub_text(mirror["TargetTransactions"]["Resource"]).endswith(
        ":transactional-id/${Cluster}/srm-mirror.${SourceAlias}-${TargetAlias}.*"
    )


def test_names_in_the_grants_are_the_ones_srm_uses() -> None:
    from srm.core.plans import mapping_group_id
    from srm.core.source_offsets import offsets_topic
    from srm.kafka.adverts import ADVERTS_TOPIC
    from srm.kafka.transactions import transactional_id
    from srm.mm2.policy import DefaultReplicationPolicy

    text = TEMPLATE.read_text()
    assert mapping_group_id("S", "T", "x").startswith("srm-mirror.S-T.")
    assert transactional_id("S", "T", "x", 0).startswith("srm-mirror.S-T.")
    assert offsets_topic("S") == "mm2-offsets.S.internal"
    policy = DefaultReplicationPolicy()
    assert policy.offset_syncs_topic("T") == "mm2-offset-syncs.T.internal"
    assert policy.checkpoints_topic("S") == "S.checkpoints.internal"
    assert policy.heartbeats_topic() == "heartbeats"
    assert ADVERTS_TOPIC in text
    app = (ROOT / "layers/core/srm/app.py").read_text()
    assert 'group_id="srm-checkpoint-probe"' in app and "srm-checkpoint-probe" in text
    adverts = (ROOT / "layers/core/srm/kafka/adverts.py").read_text()
    assert 'group_id="srm-metrics-api-discovery"' in adverts and "srm-metrics-api-discovery" in text


def test_mappings_are_tagged_only_with_the_flows_tags(translated: dict[str, Any]) -> None:
    (tag,) = [(r, s) for r, s in role_statements(translated) if "lambda:TagResource" in as_list(s["Action"])]
    role_id, s = tag
    assert role_id == "TopicSyncFunctionRole" and as_list(s["Action"]) == ["lambda:TagResource"]
    assert s["Condition"]["StringEquals"] == {
        "aws:RequestTag/srm:source": {"Ref": "SourceAlias"},
        "aws:RequestTag/srm:target": {"Ref": "TargetAlias"},
    }
    assert s["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] == ["srm:source", "srm:target", "srm:topic"]


def test_kafka_role_may_be_assumed_only_when_named(translated: dict[str, Any]) -> None:
    assumes = [(r, s) for r, s in role_statements(translated) if "sts:AssumeRole" in as_list(s["Action"])]
    assert len(assumes) == 5
    assert all(s["Resource"] == {"Ref": "KafkaRoleArn"} for _, s in assumes)
    for resource in resources_of(translated, "AWS::IAM::Role").values():
        text = json.dumps(resource["Properties"].get("Policies", []))
        if "sts:AssumeRole" in text:
            assert '"HasKafkaRole"' in text


def test_every_checkov_skip_says_why(template: dict[str, Any], monitoring: dict[str, Any]) -> None:
    skips = [
        (name, skip)
        for doc in (template, monitoring)
        for name, resource in doc["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips
    for name, skip in skips:
        assert re.fullmatch(r"CKV_AWS_\d+", skip["id"]), name
        assert len(skip["comment"]) > 20, (name, skip)


# -- (h) infra/: one samconfig per example flow and the monitoring stack ---------------------------------------------
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
