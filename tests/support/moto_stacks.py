"""Deploying a (translated) template into moto's CloudFormation, in server mode.

moto's CloudFormation creates the resources of the types its services register for it; a few types whose service
moto does emulate have no such registration (alarms, bucket policies, API stages, Firehose streams, Glue jobs and
triggers), its REST API ignores SAM's Swagger body, and its Ref of a layer version is no ARN.
:func:`register_missing_types` fills those gaps: each entry of :data:`CREATORS` creates the resource in moto's own
backend of that service, as the service's API would, so the deployed stack holds them too and their ``Ref``/``GetAtt``
resolve. Any type neither moto nor this module knows stays uncreated, and :func:`deploy` says which.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from moto.apigateway.models import apigateway_backends
from moto.awslambda.models import LayerVersion
from moto.cloudformation import parsing
from moto.cloudwatch.models import cloudwatch_backends
from moto.core.common_models import CloudFormationModel
from moto.firehose.models import firehose_backends
from moto.glue.models import glue_backends
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

__all__ = ["DeployedStack", "OfflinePolicyLoader", "deploy", "moto_server", "register_missing_types", "sam_translate"]

REGION = "us-west-2"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

Created = tuple[str, str]  # (physical id: what Ref gives, ARN: what GetAtt Arn gives)
Creator = Callable[[str, dict[str, Any], str, str], Created]  # (logical id, Properties, account, region)


def _create_alarm(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
        name=p.get("AlarmName", resource_name),
        namespace=p["Namespace"],
        metric_name=p["MetricName"],
        comparison_operator=p["ComparisonOperator"],
        evaluation_periods=int(p["EvaluationPeriods"]),
        period=int(p["Period"]),
        threshold=float(p["Threshold"]),
        statistic=p["Statistic"],
        description=p.get("AlarmDescription", ""),
        dimensions=p.get("Dimensions", []),
        alarm_actions=p.get("AlarmActions", []),
        ok_actions=p.get("OKActions", []),
        treat_missing_data=p.get("TreatMissingData"),
    )
    return alarm.name, alarm.alarm_arn


def _create_bucket_policy(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    s3_backends[account_id]["aws"].put_bucket_policy(p["Bucket"], json.dumps(p["PolicyDocument"]).encode())
    return p["Bucket"], ""


def _create_api_stage(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    deployment = p["DeploymentId"]  # moto's Ref of a deployment is the object itself
    apigateway_backends[account_id][region_name].create_stage(
        p["RestApiId"],
        p["StageName"],
        getattr(deployment, "id", deployment),
        tracing_enabled=p.get("TracingEnabled"),
    )
    return p["StageName"], ""  # the name moto gave the stage


def _create_rest_api(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    """moto's own AWS::ApiGateway::RestApi ignores Body, the OpenAPI document SAM generates, and then refuses to
    deploy an API without methods: this one imports the document, as API Gateway does."""
    backend = apigateway_backends[account_id][region_name]
    api = backend.create_rest_api(
        name=p["Name"], description=p.get("Description", ""), endpoint_configuration=p.get("EndpointConfiguration")
    )
    # moto imports OpenAPI 3 only; SAM writes Swagger 2.0: create its paths' resources and methods one by one
    children: dict[str, str] = {"": api.default.id}
    for path, operations in p.get("Body", {}).get("paths", {}).items():
        parent = ""
        for part in path.strip("/").split("/"):
            here = f"{parent}/{part}"
            if here not in children:
                children[here] = backend.create_resource(api.id, children[parent], part).id
            parent = here
        for verb, operation in operations.items():
            security = operation.get("security", [])
            auth = "AWS_IAM" if any("AWS_IAM" in s for s in security) else "NONE"
            backend.put_method(api.id, children[parent], verb.upper(), auth)
            integration = operation.get("x-amazon-apigateway-integration", {})
            backend.put_integration(
                api.id,
                children[parent],
                verb.upper(),
                integration.get("type", "aws_proxy").upper(),
                integration.get("uri", ""),
                integration.get("httpMethod", "POST"),
            )
    return api.id, ""


def _create_delivery_stream(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    arn = firehose_backends[account_id][region_name].create_delivery_stream(
        region_name,
        p["DeliveryStreamName"],
        p.get("DeliveryStreamType", "DirectPut"),
        kinesis_stream_source_configuration={},
        delivery_stream_encryption_configuration_input=p.get("DeliveryStreamEncryptionConfigurationInput", {}),
        s3_destination_configuration={},
        extended_s3_destination_configuration=p["ExtendedS3DestinationConfiguration"],
        redshift_destination_configuration={},
        elasticsearch_destination_configuration={},
        splunk_destination_configuration={},
        http_endpoint_destination_configuration={},
        snowflake_destination_configuration={},
        iceberg_destination_configuration={},
        tags=[],
    )
    return p["DeliveryStreamName"], arn


def _create_glue_job(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    glue_backends[account_id][region_name].create_job(
        name=p["Name"],
        role=p["Role"],
        command=p["Command"],
        description=p.get("Description", ""),
        log_uri="",
        execution_property=p.get("ExecutionProperty", {}),
        default_arguments=p.get("DefaultArguments", {}),
        non_overridable_arguments={},
        connections={},
        max_retries=0,
        allocated_capacity=0,
        timeout=int(p.get("Timeout", 2880)),
        max_capacity=0.0,
        security_configuration=p.get("SecurityConfiguration", ""),
        tags={},
        notification_property={},
        glue_version=p.get("GlueVersion", ""),
        number_of_workers=int(p.get("NumberOfWorkers", 0)),
        worker_type=p.get("WorkerType", ""),
        code_gen_configuration_nodes={},
        execution_class="STANDARD",
        source_control_details={},
    )
    return p["Name"], ""


def _create_glue_trigger(resource_name: str, p: dict[str, Any], account_id: str, region_name: str) -> Created:
    glue_backends[account_id][region_name].create_trigger(
        name=p["Name"],
        workflow_name="",
        trigger_type=p["Type"],
        schedule=p.get("Schedule", ""),
        predicate=None,
        actions=p["Actions"],
        description="",
        start_on_creation=bool(p.get("StartOnCreation", False)),
        tags={},
        event_batching_condition={},
    )
    return p["Name"], ""


# resource type -> how moto's backend of its service creates it
CREATORS: dict[str, Creator] = {
    "AWS::CloudWatch::Alarm": _create_alarm,
    "AWS::S3::BucketPolicy": _create_bucket_policy,
    "AWS::ApiGateway::Stage": _create_api_stage,
    "AWS::ApiGateway::RestApi": _create_rest_api,
    "AWS::KinesisFirehose::DeliveryStream": _create_delivery_stream,
    "AWS::Glue::Job": _create_glue_job,
    "AWS::Glue::Trigger": _create_glue_trigger,
}
OVERRIDDEN_TYPES = {"AWS::ApiGateway::RestApi"}  # moto has a model of its own, which falls short
ADAPTED_TYPES = set(CREATORS) - OVERRIDDEN_TYPES


class _Adapter:
    """A resource created in moto's backend of its service; Ref is its physical id, GetAtt Arn its ARN."""

    def __init__(self, physical_id: str, arn: str = "") -> None:
        self.physical_id = physical_id
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        return self.physical_id

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.arn

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""


def _adapter_model(resource_type: str, create: Creator) -> type[CloudFormationModel]:
    """The CloudFormation model of one :data:`CREATORS` entry. It derives from CloudFormationModel directly: moto
    registers the direct subclasses only."""

    class Adapter(_Adapter, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return resource_type

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[override]
            cls,
            resource_name: str,
            cloudformation_json: dict[str, Any],
            account_id: str,
            region_name: str,
            **kwargs: Any,
        ) -> Adapter:
            return cls(*create(resource_name, cloudformation_json["Properties"], account_id, region_name))

    Adapter.__qualname__ = Adapter.__name__ = f"Adapter[{resource_type}]"
    return Adapter


# held here: moto finds its models through __subclasses__, which keeps only weak references
ADAPTER_MODELS = {resource_type: _adapter_model(resource_type, create) for resource_type, create in CREATORS.items()}


def register_missing_types() -> None:
    """Make moto's CloudFormation see the adapters (its model list is cached on first use)."""
    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    models = parsing.get_model_map()
    if not hasattr(LayerVersion, "physical_resource_id"):  # moto's Ref of a layer version is its repr, not its ARN
        LayerVersion.physical_resource_id = property(lambda self: self.arn)  # type: ignore[attr-defined]
    # once moto creates one of these itself, its model should win: drop the adapter here
    moto_own = {c.cloudformation_type() for c in CloudFormationModel.__subclasses__() if c.__module__ != __name__}
    assert not ADAPTED_TYPES & moto_own, f"moto now supports {ADAPTED_TYPES & moto_own}: remove their adapters"
    assert all(models[t].__module__ == __name__ for t in ADAPTED_TYPES | OVERRIDDEN_TYPES)


@contextmanager
def moto_server() -> Iterator[str]:
    """moto in server mode on a free loopback port; yields its URL."""
    register_missing_types()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(url: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=url, region_name=REGION, **CREDENTIALS)


@dataclass
class DeployedStack:
    status: str
    reason: str
    outputs: dict[str, str]
    resources: dict[str, tuple[str, str]]  # logical id -> (type, physical id)
    unsupported: set[str]  # types moto could not create


class OfflinePolicyLoader:
    """The SAM translator asks IAM for managed policy ARNs only to resolve policies named in a template; ours names
    none, so an empty map is the whole answer and nothing reaches AWS."""

    def load(self) -> dict[str, str]:
        return {}


def sam_translate(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """The SAM transform, offline, after what ``sam package`` does: local folders become S3 objects."""
    from samtranslator.translator.transform import transform

    packaged = json.loads(json.dumps(template))
    for resource in packaged["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://artifacts/{props[key].strip('/')}.zip"
    return dict(transform(packaged, dict(parameters), OfflinePolicyLoader()))


def placeholder_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("app.py", "def lambda_handler(event, context):\n    return None\n")
    return buf.getvalue()


def deploy(url: str, name: str, template: dict[str, Any], parameters: dict[str, str]) -> DeployedStack:
    """Upload a placeholder zip for every S3 code location the template names, create the stack, describe it."""
    s3 = client(url, "s3")
    body = placeholder_zip()
    buckets: set[str] = set()
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("Code", "Content"):
            location = props.get(key)
            if isinstance(location, dict) and "S3Key" in location:
                if location["S3Bucket"] not in buckets:
                    s3.create_bucket(
                        Bucket=location["S3Bucket"], CreateBucketConfiguration={"LocationConstraint": REGION}
                    )
                    buckets.add(location["S3Bucket"])
                s3.put_object(Bucket=location["S3Bucket"], Key=location["S3Key"], Body=body)
    known = set(parsing.get_model_map())
    unsupported = {r["Type"] for r in template["Resources"].values() if r["Type"] not in known}
    cloudformation = client(url, "cloudformation")
    moto_log = logging.getLogger("moto")
    level = moto_log.level
    moto_log.setLevel(logging.ERROR)  # unsupported types are returned, not logged
    try:
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=json.dumps(template),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
            Capabilities=["CAPABILITY_IAM"],
        )
    finally:
        moto_log.setLevel(level)
    (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    summaries = cloudformation.list_stack_resources(StackName=name)["StackResourceSummaries"]
    return DeployedStack(
        status=stack["StackStatus"],
        reason=stack.get("StackStatusReason", ""),
        outputs={o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
        resources={  # moto lists a resource its condition left out, with an empty logical id
            r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", ""))
            for r in summaries
            if r["LogicalResourceId"]
        },
        unsupported=unsupported,
    )
