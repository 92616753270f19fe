"""Both templates secure by default: encryption, backups, retention, TLS, concurrency, timeouts, checkov's skips."""

from __future__ import annotations

import re
from typing import Any

import pytest

from srm.config.settings import FlowSettings
from tests.unit.sam_templates import functions


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
    # a failed batch waits for its acknowledgements, then for the producer to give its records up: twice the timeout
    assert fns["MirrorFunction"]["Properties"]["Timeout"] > 2 * delivery_s + 2
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
