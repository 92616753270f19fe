"""Both templates deployed into moto's CloudFormation (server mode): every resource is created in moto's services,
the stacks reach CREATE_COMPLETE and their outputs resolve to what was created.

moto's CloudFormation lacks a few types whose services it emulates (alarms, bucket policies, API stages, Firehose
streams, Glue jobs and triggers; its REST API ignores SAM's Swagger body): tests/support/moto_stacks.py creates
those in moto's own backends, so nothing of either template is left out. moto's models drop some properties when
they create a resource (tables' SSE and point-in-time recovery, buckets' versioning and public access block,
functions' architectures, layers and logging config): the test_template*.py modules assert those on the template."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.moto_stacks import REGION, DeployedStack, client, deploy, moto_server, sam_translate

pytest.importorskip("samtranslator", reason="the SAM transform needs aws-sam-translator (dev dependency)")

ACCOUNT = "123456789012"  # moto's default account
FLOW = {
    "SourceAlias": "us-west",
    "TargetAlias": "us-east",
    "SourceClusterArn": f"arn:aws:kafka:{REGION}:{ACCOUNT}:cluster/us-west/5f2a8c1e-3d4b-4a6f-9c0e-7b1d2e3f4a5b-3",
    "TargetClusterArn": f"arn:aws:kafka:us-east-1:{ACCOUNT}:cluster/us-east/0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f-2",
}
MONITORING_PARAMETERS = {
    "ScriptLocation": "s3://srm-artifacts/glue_jobs/aggregate_metrics.py",
    "LayerZipLocation": "s3://srm-artifacts/layers/core.zip",
}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def flow_template(template: dict[str, Any]) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", REGION)  # the translator needs a region, never a credential
        return sam_translate(template, FLOW)


@pytest.fixture(scope="module")
def flow(server: str, flow_template: dict[str, Any]) -> DeployedStack:
    return deploy(server, "srm-us-west-to-us-east", flow_template, FLOW)


@pytest.fixture(scope="module")
def monitoring_stack(server: str, monitoring: dict[str, Any]) -> DeployedStack:
    return deploy(server, "srm-monitoring", monitoring, MONITORING_PARAMETERS)


def physical(stack: DeployedStack, logical_id: str) -> str:
    return stack.resources[logical_id][1]


def holds(template: dict[str, Any], condition: str | None, parameters: dict[str, str]) -> bool:
    """Whether a resource's condition holds for these parameters (the template's resource conditions compare a
    parameter with a value)."""
    if condition is None:
        return True
    (ref, value) = template["Conditions"][condition]["Fn::Equals"]
    name = ref["Ref"]
    return parameters.get(name, template["Parameters"][name].get("Default")) == value


def layer_id(stack: DeployedStack) -> str:
    (logical_id,) = [k for k, (t, _) in stack.resources.items() if t == "AWS::Lambda::LayerVersion"]
    return logical_id


def test_flow_stack_creates_every_resource_and_completes(flow: DeployedStack, flow_template: dict[str, Any]) -> None:
    # GIVEN the translated flow template WHEN deployed THEN the stack completes with every resource created
    assert (flow.status, flow.reason) == ("CREATE_COMPLETE", "")
    assert flow.unsupported == set()
    resources = flow_template["Resources"]
    expected = {k: r["Type"] for k, r in resources.items() if holds(flow_template, r.get("Condition"), FLOW)}
    assert {k for k, r in resources.items() if r.get("Condition")}, "the layer is one resource per architecture"
    assert {k: t for k, (t, _) in flow.resources.items()} == expected
    named = {
        k for k, (t, _) in flow.resources.items() if t not in ("AWS::Lambda::Permission", "AWS::ApiGateway::Deployment")
    }
    assert all(physical(flow, k) for k in named), [k for k in named if not physical(flow, k)]


def test_flow_stack_outputs_resolve_to_what_was_created(
    server: str, flow: DeployedStack, template: dict[str, Any]
) -> None:
    outputs = flow.outputs
    assert set(outputs) == set(template["Outputs"])
    lam = client(server, "lambda")
    for fn in ("Mirror", "TopicSync", "Checkpoint", "Heartbeat", "Verify"):
        arn = outputs[f"{fn}FunctionArn"]
        assert arn == lam.get_function(FunctionName=arn)["Configuration"]["FunctionArn"]
        assert arn.endswith(physical(flow, f"{fn}Function"))
    _, name, version = outputs["SrmLayerArn"].rsplit(":", 2)
    layer = lam.get_layer_version(LayerName=name, VersionNumber=int(version))
    assert layer["LayerVersionArn"] == outputs["SrmLayerArn"] == physical(flow, layer_id(flow))
    assert layer["CompatibleRuntimes"] == ["python3.12"]
    api_id = physical(flow, "MetricsApi")
    assert outputs["MetricsApiUrl"] == f"https://{api_id}.execute-api.{REGION}.amazonaws.com/prod"
    assert outputs["DashboardName"] == "srm-us-west-to-us-east"
    client(server, "cloudwatch").get_dashboard(DashboardName=outputs["DashboardName"])
    client(server, "s3").head_bucket(Bucket=outputs["DeadLetterBucketName"])
    assert (outputs["ConfigTableName"], outputs["StateTableName"]) == ("srm-config", "srm-state")


def test_deployed_functions_have_their_runtime_timeouts_concurrency_and_log_groups(
    server: str, flow: DeployedStack
) -> None:
    lam, logs = client(server, "lambda"), client(server, "logs")
    timeouts = {}
    for fn in ("Mirror", "TopicSync", "Checkpoint", "Heartbeat", "Verify", "MetricsApi"):
        config = lam.get_function(FunctionName=physical(flow, f"{fn}Function"))["Configuration"]
        assert config["Runtime"] == "python3.12", fn
        assert config["Role"].endswith(physical(flow, f"{fn}FunctionRole")), fn
        timeouts[fn] = config["Timeout"]
        group = physical(flow, f"{fn}LogGroup")
        (described,) = logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]
        assert described["retentionInDays"] == 30, fn
    assert timeouts["Checkpoint"] < 60 < timeouts["Heartbeat"]
    assert timeouts["Verify"] == 300  # a run starts partitions in its first half: the second is theirs to finish
    iam = client(server, "iam")
    for fn in ("Mirror", "TopicSync", "Checkpoint", "Heartbeat", "Verify", "MetricsApi"):
        role = physical(flow, f"{fn}FunctionRole")
        assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []  # not in a VPC: none
        (policy,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
        document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
        if isinstance(document, str):  # moto's server answers with the document's Python repr
            document = ast.literal_eval(document)
        # (moto keeps an Fn::If that chose AWS::NoValue as null where CloudFormation drops it)
        (logs,) = [s["Resource"] for s in document["Statement"] if s and s.get("Sid") == "Logs"]
        assert f":log-group:{physical(flow, f'{fn}LogGroup')}" in logs, fn
    mirror = lam.get_function(FunctionName=physical(flow, "MirrorFunction"))
    assert mirror["Concurrency"]["ReservedConcurrentExecutions"] == 100


def test_deployed_tables_and_bucket_keep_their_protection(server: str, flow: DeployedStack) -> None:
    dynamodb = client(server, "dynamodb")
    for table in ("srm-config", "srm-state"):
        described = dynamodb.describe_table(TableName=table)["Table"]
        assert described["DeletionProtectionEnabled"] is True, table
        assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST", table
    s3 = client(server, "s3")
    bucket = flow.outputs["DeadLetterBucketName"]
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    (deny,) = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"]
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})


def test_deployed_schedules_alarms_and_api(server: str, flow: DeployedStack) -> None:
    events = client(server, "events")
    schedules = {
        physical(flow, rule): events.describe_rule(Name=physical(flow, rule))["ScheduleExpression"]
        for rule in (
            "TopicSyncFunctionSync",
            "CheckpointFunctionCheckpoint",
            "HeartbeatFunctionHeartbeat",
            "VerifyFunctionVerify",
        )
    }
    assert sorted(schedules.values()) == ["rate(1 minute)", "rate(1 minute)", "rate(1 minute)", "rate(10 minutes)"]
    alarms = client(server, "cloudwatch").describe_alarms(AlarmNamePrefix="srm-us-west-to-us-east-")["MetricAlarms"]
    assert {a["AlarmName"].rsplit("-to-us-east-", 1)[1] for a in alarms} == {
        "lag",
        "heartbeat-age",
        "failed-batches",
        "checkpoint-errors",
        "data-loss",
        "mapping-problems",
        "topic-stalled",
        "verification-differences",
    }
    api = client(server, "apigateway")
    api_id = physical(flow, "MetricsApi")
    assert api.get_stage(restApiId=api_id, stageName="prod")["tracingEnabled"] is True
    methods = [
        method
        for resource in api.get_resources(restApiId=api_id)["items"]
        for method in resource.get("resourceMethods", {}).values()
    ]
    assert len(methods) == 3
    for resource in api.get_resources(restApiId=api_id)["items"]:
        for verb in resource.get("resourceMethods", {}):
            method = api.get_method(restApiId=api_id, resourceId=resource["id"], httpMethod=verb)
            assert method["authorizationType"] == "AWS_IAM", resource["path"]


def test_monitoring_stack_creates_every_resource_and_its_outputs_resolve(
    server: str, monitoring_stack: DeployedStack, monitoring: dict[str, Any]
) -> None:
    stack, template = monitoring_stack, monitoring
    assert (stack.status, stack.reason, stack.unsupported) == ("CREATE_COMPLETE", "", set())
    assert {k: t for k, (t, _) in stack.resources.items()} == {k: r["Type"] for k, r in template["Resources"].items()}
    outputs = stack.outputs
    assert set(outputs) == set(template["Outputs"])
    stream = client(server, "firehose").describe_delivery_stream(DeliveryStreamName=outputs["MetricsStreamName"])
    assert stream["DeliveryStreamDescription"]["DeliveryStreamARN"] == outputs["MetricsStreamArn"]
    job = client(server, "glue").get_job(JobName=outputs["AggregateMetricsJobName"])["Job"]
    assert (job["GlueVersion"], job["WorkerType"], job["NumberOfWorkers"]) == ("5.0", "G.1X", 2)
    dynamodb = client(server, "dynamodb").describe_table(TableName=outputs["MetricsTableName"])["Table"]
    assert dynamodb["DeletionProtectionEnabled"] is True
    s3 = client(server, "s3")
    (deny,) = json.loads(s3.get_bucket_policy(Bucket=outputs["RawMetricsBucketName"])["Policy"])["Statement"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
