"""``template-monitoring.yaml`` (one stack per region, shared by the flow stacks) and the flow's dashboard and
alarms in ``template.yaml``, checked offline."""

from __future__ import annotations

import importlib
import importlib.util
import json
import runpy
from typing import Any

import boto3
import pytest
from cfnlint.api import lint_file
from cfnlint.config import ManualArgs
from moto import mock_aws

from tests.unit.sam_templates import MONITORING, ROOT, functions


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
