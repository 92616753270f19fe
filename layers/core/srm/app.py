"""The composition root: reads the environment once per container and builds what the use cases need.

Nothing else in ``srm`` reads ``os.environ``. A Lambda function of a flow is deployed with:

================================  =====================================================================
``SRM_SOURCE`` / ``SRM_TARGET``   the flow's cluster aliases (a stack per replication flow)
``SRM_CONFIG_TABLE``              config table name (default ``srm-config``)
``SRM_STATE_TABLE``               state table name (default ``srm-state``)
``SRM_METRICS_TABLE``             metrics table name (default ``srm-metrics``; the metrics API reads it)
``SRM_CONFIG_CACHE_SECONDS``      how stale the cached config may be (default 10)
``SRM_MIRROR_FUNCTION``           topic sync only: the mirror function's ARN, target of the event source mappings
``SRM_SOURCE_CLUSTER_ARN``        topic sync only: the source MSK cluster the mappings read
``SRM_SOURCE_AUTH``               topic sync only: how mappings authenticate (``SASL_SCRAM_512_AUTH``…; IAM if unset)
``SRM_SOURCE_SECRET_ARN``         topic sync only: the secret of those credentials
``SRM_METRICS_STREAM``            the Firehose delivery stream of raw metric records (monitoring template)
``SRM_METRICS_DIR``               local runtime: raw metric records go to ``<dir>/raw/dt=…/hour=…`` instead
``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``   where DynamoDB is (boto3 reads them)
================================  =====================================================================
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from srm.aws.config_table import ConfigStore
from srm.aws.firehose import FirehoseSink
from srm.aws.lambda_mappings import LambdaEventSources
from srm.aws.metrics_table import MetricsTable
from srm.aws.state import StateStore
from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import FlowSettings, SrmConfig
from srm.core.loops import mirror_skips
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.acls import TopicAcls
from srm.kafka.admin import RemoteTopics, ensure_topic
from srm.kafka.clients import KafkaClients, consumer_config
from srm.kafka.readers import quiet_probe
from srm.metrics.sinks import Emitter, FileSink, MetricsEmitter, NullEmitter
from srm.mm2.policy import ReplicationPolicy
from srm.replication.checkpoint import CheckpointContext
from srm.replication.continuity import log_end_lookup, topic_id_lookup
from srm.replication.heartbeat import HeartbeatContext
from srm.replication.mappings import EventSourceMappings
from srm.replication.mirror import (
    MirrorContext,
    StateWriters,
    TopicNotReplicatedError,
    log_start_lookup,
    offset_syncs_topic,
)
from srm.replication.topic_sync import SeenOnce, TopicSyncContext

__all__ = ["App", "Environment"]


@dataclass(frozen=True)
class Environment:
    source: str | None
    target: str | None
    config_table: str = "srm-config"
    state_table: str = "srm-state"
    metrics_table: str = "srm-metrics"
    config_cache_seconds: float = 10.0
    region: str = "us-east-1"
    mirror_function: str | None = None  # with source_cluster_arn: event source mappings through the Lambda API
    source_cluster_arn: str | None = None
    source_auth: tuple[str, str] | None = None  # how the mappings authenticate (SRM_SOURCE_AUTH, _SECRET_ARN)
    metrics_stream: str | None = None  # raw metrics to this Firehose stream …
    metrics_dir: str | None = None  # … or, locally, into files under this folder; neither: none are emitted

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        try:
            cache = float(env.get("SRM_CONFIG_CACHE_SECONDS", "10"))
        except ValueError:
            raise ConfigError("SRM_CONFIG_CACHE_SECONDS must be a number of seconds") from None
        return cls(
            source=env.get("SRM_SOURCE") or None,
            target=env.get("SRM_TARGET") or None,
            config_table=env.get("SRM_CONFIG_TABLE", "srm-config"),
            state_table=env.get("SRM_STATE_TABLE", "srm-state"),
            metrics_table=env.get("SRM_METRICS_TABLE", "srm-metrics"),
            config_cache_seconds=cache,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            mirror_function=env.get("SRM_MIRROR_FUNCTION") or None,
            source_cluster_arn=env.get("SRM_SOURCE_CLUSTER_ARN") or None,
            source_auth=_source_auth(env.get("SRM_SOURCE_AUTH", ""), env.get("SRM_SOURCE_SECRET_ARN", "")),
            metrics_stream=env.get("SRM_METRICS_STREAM") or None,
            metrics_dir=env.get("SRM_METRICS_DIR") or None,
        )

    def flow(self) -> Flow:
        if not self.source or not self.target:
            raise ConfigError("SRM_SOURCE and SRM_TARGET must name the flow's clusters (a stack per flow)")
        return Flow(self.source, self.target)


_MAPPING_AUTH = ("SASL_SCRAM_512_AUTH", "SASL_SCRAM_256_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH")


def _source_auth(kind: str, secret_arn: str) -> tuple[str, str] | None:
    """How the event source mappings authenticate to the source: IAM (or nothing) unless a secret is named."""
    if kind in ("", "IAM", "NONE"):
        return None
    if kind not in _MAPPING_AUTH or not secret_arn:
        raise ConfigError(f"SRM_SOURCE_AUTH={kind!r} needs one of {', '.join(_MAPPING_AUTH)} and SRM_SOURCE_SECRET_ARN")
    return kind, secret_arn


def secrets_manager_resolver(region: str) -> SecretResolver:
    """Secret references: ``${secretsmanager:<id>[:<json key>]}`` besides ``${env:…}`` and ``${file:…}``."""
    cache: dict[str, str] = {}

    def resolve(provider: str, path: str) -> str:
        if provider != "secretsmanager":
            return default_secret_resolver(provider, path)
        secret_id, json_key = _secret_ref(path)
        if secret_id not in cache:
            client = boto3.client("secretsmanager", region_name=region)
            try:
                cache[secret_id] = client.get_secret_value(SecretId=secret_id)["SecretString"]
            except (BotoCoreError, ClientError, KeyError) as e:  # KeyError: a binary secret
                raise ConfigError(f"${{secretsmanager:{path}}}: cannot read secret {secret_id}: {e}") from None
        value = cache[secret_id]
        if not json_key:
            return value
        try:
            return str(json.loads(value)[json_key])
        except (ValueError, KeyError):
            raise ConfigError(f"${{secretsmanager:{path}}}: secret has no JSON key {json_key!r}") from None

    return resolve


def _secret_ref(path: str) -> tuple[str, str]:
    """``name[:json-key]`` or ``arn:aws:secretsmanager:region:account:secret:name[:json-key]``."""
    parts = path.split(":")
    n = 7 if path.startswith("arn:") else 1
    return ":".join(parts[:n]), ":".join(parts[n:])


class _Bound(NamedTuple):
    flow: Flow
    config: SrmConfig
    settings: FlowSettings
    policy: ReplicationPolicy


class App:
    """Per-container wiring. ``App.current()`` is what handlers use; tests build their own."""

    _current: App | None = None
    _current_lock = threading.Lock()

    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        self.env = env
        self.dynamodb = dynamodb or boto3.client(
            "dynamodb", region_name=env.region, config=Config(retries={"max_attempts": 5, "mode": "standard"})
        )
        self.config_store = ConfigStore(self.dynamodb, env.config_table, env.config_cache_seconds)
        self.state = StateStore(self.dynamodb, env.state_table)
        self.metrics_table = MetricsTable(self.dynamodb, env.metrics_table)
        self.kafka = KafkaClients(secrets_manager_resolver(env.region))
        self._remote_topics: dict[Flow, RemoteTopics] = {}
        self._internal_topics: set[tuple[str, str]] = set()
        self._internal_topic_lock = threading.Lock()
        # Set by the local runtime to its emulated mappings; the Lambda API adapter otherwise.
        self.event_sources: EventSourceMappings | None = None
        if env.mirror_function and env.source_cluster_arn:
            self.event_sources = LambdaEventSources(
                boto3.client("lambda", region_name=env.region, config=Config(retries={"mode": "standard"})),
                env.mirror_function,
                env.source_cluster_arn,
                env.source_auth,
            )
        self._topic_acls: dict[Flow, TopicAcls] = {}
        self._state_writers = StateWriters()
        self._refusals_warned = SeenOnce()
        self._lock = threading.Lock()
        self.metrics = self._metrics_emitter()

    def _metrics_emitter(self) -> Emitter:
        """One emitter per container: its sender thread carries raw metric records off the record path."""
        producer = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"  # unique: ids are producer:seq
        if self.env.metrics_stream:
            client = boto3.client("firehose", region_name=self.env.region, config=Config(retries={"mode": "standard"}))
            return MetricsEmitter(FirehoseSink(client, self.env.metrics_stream), producer=producer)
        if self.env.metrics_dir:
            return MetricsEmitter(FileSink(Path(self.env.metrics_dir) / "raw", producer), producer=producer)
        return NullEmitter()

    @classmethod
    def current(cls) -> App:
        with cls._current_lock:
            if cls._current is None:
                cls._current = cls(Environment.from_env())
            return cls._current

    @classmethod
    def reset(cls) -> None:
        """Forget the per-container app (tests; a new environment)."""
        with cls._current_lock:
            cls._current = None

    def config(self) -> SrmConfig:
        return self.config_store.load()

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

    def _bind(self) -> _Bound:
        """The preamble every function context starts with: this container's flow, checked against the current
        (cached) configuration, with its settings and policy."""
        source, target = self.env.flow()
        config = self.config()
        flow = config.check_flow(source, target)
        return _Bound(flow, config, config.settings(source, target), config.policy(source, target))

    def topic_sync_context(self) -> TopicSyncContext:
        """The topic-sync function's dependencies for this container's flow."""
        flow, config, settings, policy = self._bind()
        source, target = flow
        return TopicSyncContext(
            source=source,
            target=target,
            settings=settings,
            policy=policy,
            source_admin=self.kafka.admin(config, source, Flow(source, target)),
            remote_topics=self.remote_topics(config, source, target),
            event_sources=self.event_sources,
            target_admin=self.kafka.admin(config, target, Flow(source, target)),
            state=self.state,
            acls=self._flow_acls(source, target),
            flows=config.flows,
            warned=self._refusals_warned,
            metrics=self.metrics,
        )

    def _flow_acls(self, source: str, target: str) -> TopicAcls:
        with self._lock:  # per container: it remembers which clusters have no authorizer
            return self._topic_acls.setdefault(Flow(source, target), TopicAcls())

    def heartbeat_context(self) -> HeartbeatContext | None:
        """The heartbeat function's dependencies for this container's flow; None when the flow emits none (disabled,
        or ``emit.heartbeats.enabled=false``)."""
        flow, config, settings, policy = self._bind()
        source, target = flow
        if not settings.enabled or not settings.emit_heartbeats_enabled:
            return None
        topic = policy.heartbeats_topic()
        self.ensure_internal_topic(config, source, topic, settings.heartbeats_topic_replication_factor)
        producer = self.kafka.producer(
            config,
            source,
            Flow(source, target),
            delivery_timeout_ms=settings.mirror_delivery_timeout_ms,
            tag="heartbeats",
        )
        return HeartbeatContext(source, target, topic, producer, settings.mirror_delivery_timeout_ms / 1000.0)

    def checkpoint_context(self) -> CheckpointContext:
        """The checkpoint function's dependencies for this container's flow."""
        flow, config, settings, policy = self._bind()
        source, target = flow
        self.ensure_internal_topic(
            config, target, policy.checkpoints_topic(source), settings.checkpoints_topic_replication_factor
        )
        probe_config = consumer_config(
            config, source, flow, group_id="srm-checkpoint-probe", resolver=self.kafka.resolver
        )
        return CheckpointContext(
            source=source,
            target=target,
            settings=settings,
            policy=policy,
            source_admin=self.kafka.admin(config, source, flow),
            target_admin=self.kafka.admin(config, target, flow),
            producer=self.kafka.producer(
                config, target, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="checkpoints"
            ),
            state=self.state,
            quiet=quiet_probe(probe_config, skips=mirror_skips(source, target, policy)),
            metrics=self.metrics,
        )

    def mirror_context(self) -> MirrorContext:
        """The mirror's dependencies for this container's flow, with the current (cached) configuration."""
        flow, config, settings, policy = self._bind()
        source, target = flow
        if not settings.enabled:  # retried until topic sync pauses the mappings; nothing is committed meanwhile
            raise TopicNotReplicatedError(f"{flow} is disabled; its event source mappings are being paused")
        producer = self.kafka.producer(
            config, target, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="mirror"
        )
        sync_producer = None
        if settings.emit_offset_syncs_enabled:
            location, sync_topic = offset_syncs_topic(source, target, settings, policy)
            sync_producer = (
                producer
                if location == target
                else self.kafka.producer(
                    config, location, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="offset-syncs"
                )
            )
            self.ensure_internal_topic(config, location, sync_topic, settings.offset_syncs_topic_replication_factor)
        remote_topics = self.remote_topics(config, source, target)
        source_admin = self.kafka.admin(config, source, flow)
        return MirrorContext(
            source=source,
            target=target,
            settings=settings,
            policy=policy,
            producer=producer,
            state=self.state,
            ensure_remote_topic=remote_topics.ensure,
            offset_sync_producer=sync_producer,
            state_writers=self._state_writers,
            log_start=log_start_lookup(source_admin),
            log_end=log_end_lookup(source_admin),
            topic_id=topic_id_lookup(source_admin),
            metrics=self.metrics,
        )
