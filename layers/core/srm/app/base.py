"""What every function's wiring starts from: the container's clients and stores, its configuration, and the flow it
serves (:meth:`AppBase._bind`). One instance per container; each function's wiring (:mod:`srm.app`) extends it."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Self, TypedDict

import boto3
from botocore.config import Config
from confluent_kafka import Producer

from srm.app.environment import Environment
from srm.app.stores import Stores
from srm.aws.firehose import FirehoseSink
from srm.aws.secrets import secrets_manager_resolver
from srm.config.settings import FlowSettings, SrmConfig
from srm.config.store import ConfigStore
from srm.flow import Flow
from srm.kafka.admin import RemoteTopics, ensure_topic
from srm.kafka.clients import KafkaClients
from srm.kafka.raw_metrics import KafkaSink
from srm.metrics.model.store import MetricsStore
from srm.metrics.sinks import Emitter, FileSink, MetricsEmitter, NullEmitter
from srm.mm2.policy import ReplicationPolicy
from srm.state import StateStore
from srm.state.nodes import Nodes

__all__ = ["AppBase", "Bound", "FlowFields"]


class FlowFields(TypedDict):
    """The fields every function context starts with."""

    source: str
    target: str
    settings: FlowSettings
    policy: ReplicationPolicy


class Bound(NamedTuple):
    """This container's flow, checked against the current configuration, with its settings and policy."""

    flow: Flow
    config: SrmConfig
    settings: FlowSettings
    policy: ReplicationPolicy

    def context_fields(self) -> FlowFields:
        source, target = self.flow
        return FlowFields(source=source, target=target, settings=self.settings, policy=self.policy)


class AppBase:
    """The container's clients and stores; the per-container caches of what functions share (remote topics, internal
    topics) are kept here, each function's own by its wiring.

    ``<Wiring>.current()`` is the container's one instance: on Lambda, of the wiring of the function the container
    runs (a handler imports only its own); where every function runs in one process (``srm run``'s workers, tests),
    of :class:`srm.app.composed.App`, which has them all, once that module is imported."""

    _current: ClassVar[AppBase | None] = None
    _current_lock: ClassVar[threading.Lock] = threading.Lock()
    _bound: ClassVar[ContextVar[AppBase | None]] = ContextVar("srm_app", default=None)
    composed: ClassVar[type[AppBase] | None] = None  # srm.app.composed.App, once imported

    @classmethod
    def current(cls) -> Self:
        bound = AppBase._bound.get()
        if bound is None:
            with AppBase._current_lock:
                if AppBase._current is None:
                    AppBase._current = (AppBase.composed or cls)(Environment.from_env())
                bound = AppBase._current
        if not isinstance(bound, cls):
            raise TypeError(f"this container's {type(bound).__name__} has no {cls.__name__}")
        return bound

    @classmethod
    def reset(cls) -> None:
        """Forget the per-container app (tests; a new environment)."""
        with AppBase._current_lock:
            AppBase._current = None

    @classmethod
    @contextmanager
    def serving(cls, app: AppBase) -> Iterator[AppBase]:
        """``current()`` is ``app`` in this thread meanwhile: several deployments' APIs in one test process."""
        token = AppBase._bound.set(app)
        try:
            yield app
        finally:
            AppBase._bound.reset(token)

    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        self.env = env
        self.kafka = KafkaClients(secrets_manager_resolver(env.region, env.secrets_cache_seconds))
        self.stores = Stores(env, self.kafka.resolver, dynamodb)
        self._remote_topics: dict[Flow, RemoteTopics] = {}
        self._internal_topics: set[tuple[str, str]] = set()
        self._internal_topic_lock = threading.Lock()
        self._lock = threading.Lock()
        self.metrics = self._metrics_emitter()
        # Lambda freezes a container between invocations, the metrics sender thread with it: a handler hands its raw
        # metric records over before it returns. A process that keeps running (srm run's worker) sets this False: its
        # sender sends meanwhile and at the process's exit, and a batch does not wait out the sink's round trip.
        self.hand_over_metrics_per_call = True

    def end_of_call(self, timeout_s: float) -> None:
        """What a handler does last: its raw metric records handed to the sink (at most ``timeout_s``: a slow sink
        delays a call, never fails it)."""
        if self.hand_over_metrics_per_call:
            self.metrics.flush(timeout_s)

    def _metrics_emitter(self) -> Emitter:
        """One emitter per container: its sender thread carries raw metric records off the record path."""
        producer = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"  # unique: ids are producer:seq
        if self.env.metrics_stream:
            client = boto3.client("firehose", region_name=self.env.region, config=Config(retries={"mode": "standard"}))
            return MetricsEmitter(FirehoseSink(client, self.env.metrics_stream), producer=producer)
        if self.env.metrics_topic and self.env.store_cluster:
            alias, topic = self.env.store_cluster, self.env.metrics_topic

            def kafka_producer() -> Producer:
                return self.kafka.producer(self.config(), alias, None, delivery_timeout_ms=30_000, tag="metrics")

            return MetricsEmitter(KafkaSink(kafka_producer, topic), producer=producer)
        if self.env.metrics_dir:
            return MetricsEmitter(FileSink(Path(self.env.metrics_dir) / "raw", producer), producer=producer)
        return NullEmitter()

    def config(self) -> SrmConfig:
        return self.config_store.load()

    @property
    def config_store(self) -> ConfigStore:
        return self.stores.config

    @property
    def state(self) -> StateStore:
        return self.stores.state

    @property
    def metrics_store(self) -> MetricsStore:
        return self.stores.metrics

    def nodes(self, config: SrmConfig) -> Nodes:
        """The nodes of this ``srm run`` cluster, as the state records them."""
        return self.stores.nodes(config.nodes().group_id)

    def remote_topics(self, config: SrmConfig, source: str, target: str) -> RemoteTopics:
        settings = config.settings(source, target)
        with self._lock:
            topics = self._remote_topics.get(Flow(source, target))
            if topics is None:
                topics = RemoteTopics(
                    self.kafka.admin(config, source, Flow(source, target)),
                    self.kafka.admin(config, target, Flow(source, target)),
                    settings.replication_factor,
                    settings.config_exclude(),
                )
                self._remote_topics[Flow(source, target)] = topics
            return topics

    def ensure_internal_topic(self, config: SrmConfig, alias: str, topic: str, replication_factor: int) -> None:
        """Create a single-partition compacted bookkeeping topic once per container (MM2's internal topics)."""
        with self._internal_topic_lock:  # once per container, even when several invocations race here
            if (alias, topic) in self._internal_topics:
                return
            ensure_topic(self.kafka.admin(config, alias), topic, 1, replication_factor, {"cleanup.policy": "compact"})
            self._internal_topics.add((alias, topic))

    def _bind(self) -> Bound:
        """The preamble every function context starts with: this container's flow, checked against the current
        (cached) configuration, with its settings and policy."""
        source, target = self.env.flow()
        config = self.config()
        flow = config.check_flow(source, target)
        return Bound(flow, config, config.settings(source, target), config.policy(source, target))
