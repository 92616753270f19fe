"""Provisioned mode of the mirror's event source mappings: the ``event.source.provisioned.pollers.min``/``.max``
settings, and the Lambda API adapter applying them, on moto.

moto holds ``ProvisionedPollerConfig`` as Lambda does (stored on create, replaced on update, listed back) but refuses
MSK event sources ("Invalid EventSourceArn": it keeps mappings of SQS, Kinesis and DynamoDB only), so an SQS queue
stands in for the source cluster here; the adapter sends the same request whatever the ARN. Every request is also
captured with a ``before-call`` hook on the moto client, to check what real Lambda would be sent."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from srm.aws.lambda_mappings import LambdaEventSources
from srm.config.parsing import parse_properties_text
from srm.config.settings import FlowSettings, SrmConfig
from srm.core.plans import TopicPlan
from srm.errors import ConfigError
from srm.replication.mappings import sync_mappings

PLAN = TopicPlan({"orders": ("a.orders", 6)}, frozenset({"orders"}))
ON_DEMAND = FlowSettings.model_validate({"enabled": True})


def provisioned(low: int, high: int) -> FlowSettings:
    return FlowSettings.model_validate(
        {"enabled": True, "event.source.provisioned.pollers.min": low, "event.source.provisioned.pollers.max": high}
    )


FLOW = ("clusters = a, b", "a.bootstrap.servers = a:9092", "b.bootstrap.servers = b:9092", "a->b.enabled = true")


def load(*lines: str) -> SrmConfig:
    return SrmConfig.from_properties(parse_properties_text("\n".join((*FLOW, *lines)) + "\n", "mm2.properties"))


# -- the settings -------------------------------------------------------------------------------------------------
def test_pollers_unset_by_default_mean_on_demand():
    assert load().settings("a", "b").provisioned_pollers is None


def test_pollers_may_come_from_different_levels():
    # GIVEN the minimum for every flow and the maximum for a->b only THEN a->b has both
    config = load("event.source.provisioned.pollers.min = 2", "a->b.event.source.provisioned.pollers.max = 20")
    assert config.settings("a", "b").provisioned_pollers == (2, 20)


def test_pollers_at_lambdas_limits_are_accepted():
    config = load("event.source.provisioned.pollers.min = 200", "event.source.provisioned.pollers.max = 2000")
    assert config.settings("a", "b").provisioned_pollers == (200, 2000)


@pytest.mark.parametrize(
    ("lines", "key", "fragment"),
    [
        pytest.param(
            ["a->b.event.source.provisioned.pollers.min = 2"],
            "a->b.event.source.provisioned.pollers.min",
            "needs event.source.provisioned.pollers.max too",
            id="min-alone",
        ),
        pytest.param(
            ["event.source.provisioned.pollers.max = 20"],
            "event.source.provisioned.pollers.max",
            "needs event.source.provisioned.pollers.min too",
            id="max-alone",
        ),
        pytest.param(
            ["event.source.provisioned.pollers.min = 30", "event.source.provisioned.pollers.max = 20"],
            "event.source.provisioned.pollers.min",
            "more than event.source.provisioned.pollers.max (20)",
            id="min-above-max",
        ),
        pytest.param(
            ["event.source.provisioned.pollers.min = 0", "event.source.provisioned.pollers.max = 20"],
            "event.source.provisioned.pollers.min",
            "greater than or equal to 1",
            id="min-zero",
        ),
        pytest.param(
            ["event.source.provisioned.pollers.min = 201", "event.source.provisioned.pollers.max = 300"],
            "event.source.provisioned.pollers.min",
            "less than or equal to 200",
            id="min-above-200",
        ),
        pytest.param(
            ["event.source.provisioned.pollers.min = 1", "event.source.provisioned.pollers.max = 2001"],
            "event.source.provisioned.pollers.max",
            "less than or equal to 2000",
            id="max-above-2000",
        ),
    ],
)
def test_pollers_invalid_is_one_line_naming_key_and_line(lines, key, fragment):
    with pytest.raises(ConfigError) as info:
        load(*lines)
    error = info.value
    line = len(FLOW) + 1 + [text.split(" = ")[0] for text in lines].index(key)
    assert error.key == key
    assert str(error).startswith(f"mm2.properties:{line}: {key}=")
    assert fragment in str(error) and "\n" not in str(error)


# -- the Lambda API adapter, on moto -------------------------------------------------------------------------------
class Lambda:
    """The mirror function and a stand-in event source on moto, the adapter on them, and every request sent."""

    def __init__(self) -> None:
        region = "us-west-2"
        role = boto3.client("iam", region_name=region).create_role(RoleName="mirror", AssumeRolePolicyDocument="{}")
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as z:
            z.writestr("app.py", "def lambda_handler(event, context):\n    pass\n")
        self.client = boto3.client("lambda", region_name=region)
        function = self.client.create_function(
            FunctionName="srm-a-b-mirror",
            Runtime="python3.12",
            Role=role["Role"]["Arn"],
            Handler="app.lambda_handler",
            Code={"ZipFile": code.getvalue()},
        )["FunctionArn"]
        sqs = boto3.client("sqs", region_name=region)
        queue = sqs.create_queue(QueueName="stands-in-for-the-msk-cluster")["QueueUrl"]
        source = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.port = LambdaEventSources(self.client, function, source)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.client.meta.events.register("before-call.lambda", self._capture)

    def _capture(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        """The request body as it goes on the wire (JSON): its ``ProvisionedPollerConfig``, or "absent"."""
        if model.name != "ListEventSourceMappings":
            body = json.loads(params["body"] or b"{}")
            self.sent.append((model.name, body.get("ProvisionedPollerConfig", "absent")))

    def sync(self, settings: FlowSettings) -> dict[str, list[str]]:
        self.sent = []
        return sync_mappings(self.port, "a", "b", PLAN, settings).summary()

    def pollers_listed(self) -> Any:
        (mapping,) = self.client.list_event_source_mappings()["EventSourceMappings"]
        return mapping.get("ProvisionedPollerConfig")


@pytest.fixture
def lam() -> Iterator[Lambda]:
    with mock_aws():
        yield Lambda()


def test_provisioned_pollers_create_update_and_remove_follow_the_settings(lam):
    # GIVEN a flow in provisioned mode, 2 to 10 pollers per mapping
    # WHEN a topic's mapping is created THEN it is created with them, and a second sync is in step
    assert lam.sync(provisioned(2, 10)) == {"create": ["orders"]}
    assert lam.sent == [("CreateEventSourceMapping", {"MinimumPollers": 2, "MaximumPollers": 10})]
    assert lam.pollers_listed() == {"MinimumPollers": 2, "MaximumPollers": 10}
    assert lam.sync(provisioned(2, 10)) == {}
    # WHEN the bounds change THEN the mapping is updated to them
    assert lam.sync(provisioned(4, 40)) == {"update": ["orders"]}
    assert lam.sent == [("UpdateEventSourceMapping", {"MinimumPollers": 4, "MaximumPollers": 40})]
    assert lam.pollers_listed() == {"MinimumPollers": 4, "MaximumPollers": 40}
    # WHEN both keys are removed THEN an empty config returns the mapping to on-demand polling, once
    assert lam.sync(ON_DEMAND) == {"update": ["orders"]}
    assert lam.sent == [("UpdateEventSourceMapping", {})]
    assert not lam.pollers_listed()
    assert lam.sync(ON_DEMAND) == {}


def test_on_demand_flow_never_sends_a_poller_config(lam):
    # GIVEN a flow without the keys WHEN its mapping is created and its batch size changes
    lam.sync(ON_DEMAND)
    created = lam.sent
    lam.sync(ON_DEMAND.model_copy(update={"event_source_batch_size": 500}))
    # THEN neither request names provisioned pollers (Lambda keeps its on-demand scaling)
    assert created + lam.sent == [
        ("CreateEventSourceMapping", "absent"),
        ("UpdateEventSourceMapping", "absent"),
    ]
