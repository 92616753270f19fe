"""The mirror Lambda handler in-process: flow a->b on real clusters, its config and state tables on moto, the handler's
environment set; and the events the event source builds for it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from srm.app import App, Environment
from srm.aws.config_table import DynamoDBConfig
from srm.aws.state import DynamoDBState
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.core.events import DecodedEvent, DecodedEventBuilder, EventBuilder
from srm.local.context import LocalContext
from tests.support.kafka import Rec

CONTEXT = LocalContext("srm-a-b-mirror")
CONFIG_TABLE, STATE_TABLE = "srm-config", "srm-state"
# what the mirror function of flow a->b is deployed with
HANDLER_ENV = {"SRM_SOURCE": "a", "SRM_TARGET": "b", "SRM_CONFIG_TABLE": CONFIG_TABLE, "SRM_STATE_TABLE": STATE_TABLE}
_SOURCE_ARN = "arn:aws:kafka:us-east-1:000000000000:cluster/a/local"
_MAX_PAYLOAD = 6 * 1024 * 1024


class HandlerFlow:
    """Flow a->b between two bootstraps, configured in the config table of ``dynamodb`` (both tables exist)."""

    def __init__(self, a: str, b: str, dynamodb: Any) -> None:
        self.a, self.b, self.dynamodb = a, b, dynamodb
        self.state = DynamoDBState(dynamodb, STATE_TABLE)

    def configure(
        self, prefix: str, flow: Mapping[str, str] | None = None, shared: Mapping[str, str] | None = None
    ) -> None:
        """Replace the config: a->b selects the topics ``<prefix>.*``, with ``flow`` settings of its own and ``shared``
        (global) ones; the next invocation builds its App from it."""
        properties = {
            "clusters": "a, b",
            "a.bootstrap.servers": self.a,
            "b.bootstrap.servers": self.b,
            "a->b.enabled": "true",
            "a->b.topics": f"{prefix}\\..*",
            "replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            **{f"a->b.{key}": value for key, value in (flow or {}).items()},
            **(shared or {}),
        }
        DynamoDBConfig(self.dynamodb, CONFIG_TABLE).replace_all(SrmConfig.from_properties(Properties.of(properties)))
        App.reset()

    def container(self) -> App:
        """Another App on the same tables: another Lambda container of the flow's mirror function."""
        return App(Environment("a", "b"), dynamodb=self.dynamodb)


def kafka_event(source: str, topic: str, records: dict[int, list[Rec]]) -> dict[str, Any]:
    """The MSK event the event source builds for these records (byte for byte, through the JSON round trip)."""
    builder = EventBuilder(_SOURCE_ARN, source, _MAX_PAYLOAD)
    for partition, recs in records.items():
        for r in recs:
            estimate = EventBuilder.estimate(r.key, r.value, r.headers)
            builder.add(topic, partition, r.offset, r.timestamp, "CREATE_TIME", r.key, r.value, r.headers, estimate)
    return json.loads(builder.to_bytes())


def decoded_event(source: str, topic: str, records: dict[int, list[Rec]]) -> DecodedEvent:
    """The same records as the local event source hands them over by default: decoded, no JSON."""
    builder = DecodedEventBuilder(_SOURCE_ARN, source, _MAX_PAYLOAD)
    for partition, recs in records.items():
        for r in recs:
            assert not builder.offer(topic, partition, r.offset, r.timestamp, "CREATE_TIME", r.key, r.value, r.headers)
    return builder.payload()
