"""The topic-sync function's wiring: its context for this container's flow, with the event source mappings it
manages (Lambda's, or the local runtime's emulated ones) and what it remembers across runs."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from srm.app.environment import Environment
from srm.app.metrics_api import MetricsApiWiring
from srm.aws.lambda_mappings import LambdaEventSources
from srm.flow import Flow
from srm.kafka.acls import TopicAcls
from srm.replication.mappings import EventSourceMappings
from srm.replication.takeover import Takeover
from srm.replication.topic_sync import SeenOnce, TopicSyncContext

__all__ = ["TopicSyncWiring"]


class TopicSyncWiring(MetricsApiWiring):  # topic sync advertises the metrics API of this deployment
    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        super().__init__(env, dynamodb)
        # Set by the local runtime to its emulated mappings; the Lambda API adapter otherwise.
        self.event_sources: EventSourceMappings | None = None
        if env.mirror_function and env.source_cluster_arn:
            self.event_sources = LambdaEventSources(
                boto3.client("lambda", region_name=env.region, config=Config(retries={"mode": "standard"})),
                env.mirror_function,
                env.source_cluster_arn,
                env.source_auth,
                env.mapping_failure_destination,
            )
        self._topic_acls: dict[Flow, TopicAcls] = {}
        self._refusals_warned = SeenOnce()

    def topic_sync_context(self) -> TopicSyncContext:
        """The topic-sync function's dependencies for this container's flow."""
        bound = self._bind()
        flow, config, _, _ = bound
        source, target = flow
        source_admin = self.kafka.admin(config, source, flow)
        target_admin = self.kafka.admin(config, target, flow)
        return TopicSyncContext(
            **bound.context_fields(),
            source_admin=source_admin,
            remote_topics=self.remote_topics(config, source, target),
            event_sources=self.event_sources,
            target_admin=target_admin,
            takeover=Takeover.for_flow(config, flow, self.kafka.resolver, source_admin, target_admin),
            state=self.state,
            acls=self._flow_acls(source, target),
            flows=config.flows,
            warned=self._refusals_warned,
            metrics=self.metrics,
            start_from=config.start_from(source, target),
        )

    def _flow_acls(self, source: str, target: str) -> TopicAcls:
        with self._lock:  # per container: it remembers which clusters have no authorizer
            return self._topic_acls.setdefault(Flow(source, target), TopicAcls())
