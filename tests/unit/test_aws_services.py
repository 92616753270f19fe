"""The flow's CloudWatch dashboard and alarms as the template defines them, put through CloudWatch's API, and secret
references resolved from Secrets Manager by srm's resolver — on moto, or LocalStack (make test-localstack)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from srm.app import secrets_manager_resolver
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.kafka.clients import producer_config
from srm.metrics import dashboard
from tests.support.aws import aws
from tests.unit.sam_templates import ROOT, load_template

pytestmark = pytest.mark.aws_adapter

REGION = "us-east-1"
NO_VALUE = object()


@pytest.fixture
def cloud() -> Iterator[None]:
    with aws():
        yield


# -- a stack's dashboard and alarms -----------------------------------------------------------------------------
class Stack:
    """The template's values for one flow, resolved as CloudFormation would (the intrinsics the alarms and the
    dashboard use: Ref, Fn::Sub, Fn::If and the conditions)."""

    def __init__(self, template: dict[str, Any], names: dict[str, Any]) -> None:
        params = {k: str(p.get("Default", "")) for k, p in template["Parameters"].items()}
        self.names = {**params, "AWS::NoValue": NO_VALUE, **names}
        self.template = template

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.resolve(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (fn, arg), *_ = node.items()
            if fn == "Ref":
                return self.names[arg]
            if fn == "Fn::Sub":
                return re.sub(r"\$\{([^}!]+)\}", lambda m: str(self.names[m[1]]), arg)
            if fn == "Fn::If":
                name, yes, no = arg
                return self.resolve(yes if self.condition(name) else no)
        resolved = {k: self.resolve(v) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def condition(self, name: str) -> bool:
        def value(node: Any) -> Any:
            if isinstance(node, dict):
                (fn, arg), *_ = node.items()
                if fn == "Fn::Equals":
                    return value(arg[0]) == value(arg[1])
                if fn == "Fn::Not":
                    return not value(arg[0])
                if fn == "Fn::And":
                    return all(value(a) for a in arg)
                if fn == "Fn::Or":
                    return any(value(a) for a in arg)
                if fn == "Condition":
                    return self.condition(arg)
                if fn == "Fn::Join":
                    return arg[0].join(value(arg[1]) if isinstance(arg[1], dict) else arg[1])
                return self.resolve(node)
            return node

        return bool(value(self.template["Conditions"][name]))


def alarm_arguments(props: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's alarm properties are PutMetricAlarm's parameters; its number parameters arrive as strings."""
    args = dict(props)
    for key in ("Period", "EvaluationPeriods", "DatapointsToAlarm"):
        if key in args:
            args[key] = int(args[key])
    args["Threshold"] = float(args["Threshold"])
    return args


def test_the_flows_alarms_and_dashboard_are_accepted_and_read_back(cloud: None, template: dict[str, Any]) -> None:
    # GIVEN the stack of flow a->b, alarms notifying an SNS topic
    topic = boto3.client("sns", region_name=REGION).create_topic(Name="srm-alarms")["TopicArn"]
    account = boto3.client("sts", region_name=REGION).get_caller_identity()["Account"]
    functions = {f: f"srm-a-to-b-{f}" for f in dashboard.FUNCTIONS}
    names = {"SourceAlias": "a", "TargetAlias": "b", "AlarmTopicArn": topic, "AWS::Region": REGION, **functions}
    names["AWS::AccountId"] = account
    stack = Stack(template, names)
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)

    # WHEN its alarms are put as the template defines them
    expected = {a: stack.resolve(template["Resources"][a]["Properties"]) for a in dashboard.ALARMS}
    for props in expected.values():
        cloudwatch.put_metric_alarm(**alarm_arguments(props))

    # THEN CloudWatch holds each with its metric, dimensions, threshold and the topic as action
    described = {a["AlarmName"]: a for a in cloudwatch.describe_alarms(AlarmNamePrefix="srm-a-to-b-")["MetricAlarms"]}
    assert set(described) == {p["AlarmName"] for p in expected.values()}
    for props in expected.values():
        alarm = described[props["AlarmName"]]
        args = alarm_arguments(props)
        for key in ("Namespace", "MetricName", "Dimensions", "Statistic", "Period", "EvaluationPeriods", "Threshold"):
            assert alarm[key] == args[key], (props["AlarmName"], key)
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["TreatMissingData"] == props["TreatMissingData"]
        assert alarm["AlarmActions"] == alarm["OKActions"] == [topic]
    assert {a["Dimensions"][0]["Value"] for a in described.values()} == {"a->b", functions["CheckpointFunction"]}

    # WHEN the dashboard is put with the alarms' ARNs filled in, as !Sub does
    arns = {f"{a}.Arn": described[p["AlarmName"]]["AlarmArn"] for a, p in expected.items()}
    body = Stack(template, {**names, **arns}).resolve({"Fn::Sub": dashboard.body()})
    name = stack.resolve(template["Resources"]["FlowDashboard"]["Properties"]["DashboardName"])
    answer = cloudwatch.put_dashboard(DashboardName=name, DashboardBody=body)

    # THEN it is valid as it is and read back unchanged; its alarm widget shows exactly the flow's alarms
    assert answer.get("DashboardValidationMessages", []) == []
    stored = json.loads(cloudwatch.get_dashboard(DashboardName=name)["DashboardBody"])
    assert stored == json.loads(body)
    assert [d["DashboardName"] for d in cloudwatch.list_dashboards(DashboardNamePrefix="srm-")["DashboardEntries"]] == [
        "srm-a-to-b"
    ]
    assert set(stored["widgets"][0]["properties"]["alarms"]) == {a["AlarmArn"] for a in described.values()}


def test_a_flow_metric_is_read_back_by_the_alarms_dimensions(cloud: None) -> None:
    # GIVEN lag samples of flow a->b and of another flow within one minute
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    for flow, lag in (("a->b", 5.0), ("a->b", 50.0), ("b->a", 500.0)):
        cloudwatch.put_metric_data(
            Namespace="ServerlessSRM",
            MetricData=[
                {"MetricName": "MessageLag", "Dimensions": [{"Name": "Flow", "Value": flow}], "Timestamp": minute}
                | {"Value": lag, "Unit": "Count"}
            ],
        )

    # WHEN the lag alarm's statistic is asked for the flow / THEN it is that flow's maximum
    stats = cloudwatch.get_metric_statistics(
        Namespace="ServerlessSRM",
        MetricName="MessageLag",
        Dimensions=[{"Name": "Flow", "Value": "a->b"}],
        StartTime=minute - timedelta(minutes=5),
        EndTime=minute + timedelta(minutes=5),
        Period=60,
        Statistics=["Maximum", "SampleCount"],
    )["Datapoints"]
    assert [(p["Maximum"], p["SampleCount"]) for p in stats] == [(50.0, 2.0)]


# -- table names ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["template.yaml", "template-monitoring.yaml"])
def test_table_name_parameters_admit_only_names_dynamodb_accepts(name: str) -> None:
    # DynamoDB refuses names under 3 characters (LocalStack's DynamoDB Local does; moto creates them): a parameter
    # that admits one lets the stack fail at the table instead of at the parameter.
    params = load_template(ROOT / name)["Parameters"]
    tables = {k: p for k, p in params.items() if k.endswith("TableName")}
    assert tables
    for key, param in tables.items():
        pattern = re.compile(param["AllowedPattern"])
        assert [bool(pattern.match(n)) for n in ("ab", "a b", "srm", "srm-metrics.v2_1", "x" * 256)] == [
            False,
            False,
            True,
            True,
            False,
        ], (name, key)


# -- secrets ----------------------------------------------------------------------------------------------------
def test_secret_references_resolve_from_secrets_manager_by_name_arn_and_json_key(cloud: None) -> None:
    # GIVEN a SCRAM login as a JSON secret, and a plain-text secret
    secrets = boto3.client("secretsmanager", region_name=REGION)
    login = json.dumps({"username": "alice", "password": "s3cr3t-Pa55"})
    arn = secrets.create_secret(Name="AmazonMSK_srm-a", SecretString=login)["ARN"]
    secrets.create_secret(Name="srm/truststore", SecretString="/etc/ssl/a.pem")
    config = SrmConfig.from_properties(
        Properties.of(
            {
                "clusters": "a, b",
                "a.bootstrap.servers": "a:9096",
                "b.bootstrap.servers": "b:9092",
                "a.security.protocol": "SASL_SSL",
                "a.sasl.mechanism": "SCRAM-SHA-512",
                "a.sasl.username": "${secretsmanager:AmazonMSK_srm-a:username}",
                "a.sasl.password": f"${{secretsmanager:{arn}:password}}",
                "a.ssl.ca.location": "${secretsmanager:srm/truststore}",
            }
        )
    )

    # WHEN the producer's librdkafka settings are built through srm's resolver
    conf = producer_config(config, "a", None, delivery_timeout_ms=1000, resolver=secrets_manager_resolver(REGION))

    # THEN the references are the secrets' values, by name or ARN, whole or one JSON key
    assert (conf["sasl.username"], conf["sasl.password"], conf["ssl.ca.location"]) == (
        "alice",
        "s3cr3t-Pa55",
        "/etc/ssl/a.pem",
    )


def test_a_missing_secret_or_json_key_is_a_one_line_error_without_the_value(cloud: None) -> None:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    secrets.create_secret(Name="srm/a", SecretString=json.dumps({"password": "s3cr3t-Pa55"}))
    resolve = secrets_manager_resolver(REGION)

    with pytest.raises(ConfigError, match=r"^\$\{secretsmanager:srm/nope\}: cannot read secret srm/nope: ") as missing:
        resolve("secretsmanager", "srm/nope")
    with pytest.raises(ConfigError, match=r"^\$\{secretsmanager:srm/a:user\}: secret has no JSON key 'user'$") as key:
        resolve("secretsmanager", "srm/a:user")
    for raised in (missing, key):
        assert "\n" not in str(raised.value)
        assert "s3cr3t" not in str(raised.value)
