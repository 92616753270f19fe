"""``template.yaml``'s IAM, after the SAM transform: least privilege, statement by statement."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.sam_templates import ROOT, TEMPLATE, as_list, kafka_grants, resources_of, role_statements, sub_text

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
    assert len(granted) == 6  # every function, each reaches Kafka


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


def test_verify_function_reads_kafka_and_writes_only_the_flows_status(translated: dict[str, Any]) -> None:
    # GIVEN the verify function's role WHEN its statements are read THEN it writes no Kafka topic and no group offset,
    # touches no Lambda resource, and of DynamoDB writes only items of the state table (the flow's status facts)
    grants = [s for r, s in role_statements(translated) if r == "VerifyFunctionRole"]
    actions = {a for s in grants for a in as_list(s["Action"])}
    assert not {a for a in actions if a.startswith("lambda:")}
    kafka_writes = {"kafka-cluster:WriteData", "kafka-cluster:WriteDataIdempotently", "kafka-cluster:CreateTopic"}
    assert not actions & kafka_writes
    reads = {"dynamodb:Query", "dynamodb:Scan"}
    dynamodb_writes = {a for a in actions if a.startswith("dynamodb:") and not is_read_only(a) and a not in reads}
    assert dynamodb_writes == {"dynamodb:UpdateItem"}
    (state,) = [s for s in grants if "dynamodb:UpdateItem" in as_list(s["Action"])]
    assert sub_text(state["Resource"]).endswith(":table/${StateTableName}")
    # its consumer's group, and only it, on either cluster (ReadData under MSK IAM needs AlterGroup on the group)
    groups = [s for s in grants if "kafka-cluster:AlterGroup" in as_list(s["Action"])]
    assert len(groups) == 2
    for statement in groups:
        assert sub_text(statement["Resource"]).endswith(":group/${Cluster}/srm-verify-${SourceAlias}-${TargetAlias}")


def test_functions_that_emit_raw_metrics_may_put_to_the_stream_only(translated: dict[str, Any]) -> None:
    emitting = {"srm-mirror", "srm-topic-sync", "srm-checkpoint", "srm-verify"}
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


def test_mapping_failures_go_where_topic_sync_points_the_mappings(translated: dict[str, Any]) -> None:
    # the destination topic sync gives the mappings is the one the mirror's role (theirs) may write to
    env = resources_of(translated, "AWS::Lambda::Function")["TopicSyncFunction"]["Properties"]["Environment"]
    destination = env["Variables"]["SRM_MAPPING_FAILURE_DESTINATION"]["Fn::If"]
    assert destination[0] == "HasMappingFailureDestination"
    mirror = [s for role, s in role_statements(translated) if role == "MirrorFunctionRole"]
    granted = [s["Resource"] for s in mirror if s.get("Sid") == "MappingFailures"]
    assert destination[1] in granted
    assert any(isinstance(r, list) and {"Fn::GetAtt": ["DeadLetterBucket", "Arn"]} in r for r in granted)


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
    app = "".join(p.read_text() for p in sorted((ROOT / "layers/core/srm/app").glob("*.py")))  # the composition root
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
    assert len(assumes) == 6  # every function
    assert all(s["Resource"] == {"Ref": "KafkaRoleArn"} for _, s in assumes)
    for resource in resources_of(translated, "AWS::IAM::Role").values():
        text = json.dumps(resource["Properties"].get("Policies", []))
        if "sts:AssumeRole" in text:
            assert '"HasKafkaRole"' in text
