"""The stores of a process, chosen by its environment: on AWS (and ``srm run --endpoint-url``) DynamoDB's tables;
for ``srm run`` by default, the store cluster's topics (``SRM_STATE_TOPIC`` on ``SRM_STORE_CLUSTER``, reached with
``SRM_STORE_PROPERTIES``). Each is opened on first use: a function reads only what it needs."""

from __future__ import annotations

import json
import threading
from typing import Any

import boto3
from botocore.config import Config

from srm.app.environment import Environment
from srm.aws.config_table import DynamoDBConfig
from srm.aws.metrics_table import MetricsTable
from srm.aws.nodes import DynamoDBNodes
from srm.aws.state import DynamoDBState
from srm.config.parsing import Properties
from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.config.store import ConfigStore
from srm.kafka.config_store import KafkaConfig
from srm.kafka.metrics_store import KafkaMetrics
from srm.kafka.nodes import KafkaNodes
from srm.kafka.state import KafkaState
from srm.metrics.model.store import MetricsStore
from srm.state import StateStore
from srm.state.nodes import Nodes

__all__ = ["Stores"]


class Stores:
    def __init__(self, env: Environment, resolver: SecretResolver, dynamodb: Any | None = None) -> None:
        self.env = env
        self._resolver = resolver
        self._dynamodb = dynamodb
        self._lock = threading.RLock()
        self._state: StateStore | None = None
        self._config: ConfigStore | None = None
        self._metrics: MetricsStore | None = None

    @property
    def in_kafka(self) -> bool:
        return bool(self.env.state_topic)

    @property
    def dynamodb(self) -> Any:
        with self._lock:
            if self._dynamodb is None:
                self._dynamodb = boto3.client(
                    "dynamodb",
                    region_name=self.env.region,
                    config=Config(retries={"max_attempts": 5, "mode": "standard"}),
                )
            return self._dynamodb

    def store_config(self) -> SrmConfig:
        """The settings of the store cluster's clients (``SRM_STORE_PROPERTIES``: the configuration's global and
        store cluster's properties, secrets as references)."""
        if not self.env.store_properties or not self.env.store_cluster:
            raise RuntimeError("SRM_STATE_TOPIC needs SRM_STORE_CLUSTER and SRM_STORE_PROPERTIES")
        return SrmConfig.from_properties(Properties.of(json.loads(self.env.store_properties), "SRM_STORE_PROPERTIES"))

    def _kafka_state(self) -> KafkaState:
        state = self.state
        assert isinstance(state, KafkaState)
        return state

    @property
    def state(self) -> StateStore:
        """The state: the state topic, read in on first use, or the state table."""
        with self._lock:
            if self._state is None:
                if self.in_kafka:
                    assert self.env.state_topic and self.env.store_cluster
                    worker = bool(self.env.node_id and self.env.source)  # it writes its member record at once
                    self._state = KafkaState.on_cluster(
                        self.store_config(), self.env.store_cluster, self.env.state_topic, self._resolver
                    ).start(writer=worker)
                else:
                    self._state = DynamoDBState(self.dynamodb, self.env.state_table)
            return self._state

    @property
    def config(self) -> ConfigStore:
        with self._lock:
            if self._config is None:
                cache = self.env.config_cache_seconds
                if self.in_kafka:
                    self._config = KafkaConfig(self._kafka_state(), cache)
                else:
                    self._config = DynamoDBConfig(self.dynamodb, self.env.config_table, cache)
            return self._config

    def nodes(self, group: str) -> Nodes:
        if self.in_kafka:
            return KafkaNodes(self._kafka_state(), group)
        return DynamoDBNodes(self.dynamodb, self.env.state_table, group)

    @property
    def metrics(self) -> MetricsStore:
        with self._lock:
            if self._metrics is None:
                if self.in_kafka and self.env.metrics_store_topic:
                    assert self.env.store_cluster
                    self._metrics = KafkaMetrics.on_cluster(
                        self.store_config(), self.env.store_cluster, self.env.metrics_store_topic, self._resolver
                    )
                else:
                    self._metrics = MetricsTable(self.dynamodb, self.env.metrics_table)
            return self._metrics

    def close(self) -> None:
        with self._lock:
            for store in (self._state, self._metrics):
                if isinstance(store, (KafkaState, KafkaMetrics)):
                    store.stop()
            self._state = self._metrics = self._config = None
