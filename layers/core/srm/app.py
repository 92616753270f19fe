"""The composition root: reads the environment once per container and builds what the use cases need.

Nothing else in ``srm`` reads ``os.environ``. A Lambda function of a flow is deployed with:

================================  =====================================================================
``SRM_SOURCE`` / ``SRM_TARGET``   the flow's cluster aliases (a stack per replication flow)
``SRM_CONFIG_TABLE``              config table name (default ``srm-config``)
``SRM_STATE_TABLE``               state table name (default ``srm-state``)
``SRM_METRICS_TABLE``             metrics table name (default ``srm-metrics``; the metrics API reads it)
``SRM_CONFIG_CACHE_SECONDS``      how stale the cached config may be (default 10)
``SRM_SECRETS_CACHE_SECONDS``     how long a Secrets Manager value is cached (default 300; rotation shows after it)
``SRM_MIRROR_FUNCTION``           topic sync only: the mirror function's ARN, target of the event source mappings
``SRM_SOURCE_CLUSTER_ARN``        topic sync only: the source MSK cluster the mappings read
``SRM_SOURCE_AUTH``               topic sync only: how mappings authenticate (``SASL_SCRAM_512_AUTH``…; IAM if unset)
``SRM_SOURCE_SECRET_ARN``         topic sync only: the secret of those credentials
``SRM_MAPPING_FAILURE_DESTINATION`` topic sync only: the mappings' on-failure destination (``event.source.on.failure``)
``SRM_METRICS_STREAM``            the Firehose delivery stream of raw metric records (monitoring template)
``SRM_METRICS_DIR``               local runtime: raw metric records go to ``<dir>/raw/dt=…/hour=…`` instead …
``SRM_METRICS_TOPIC``             … or, with the state in Kafka, to this topic on ``SRM_STORE_CLUSTER`` (all nodes')
``SRM_NODE_ID``                   local runtime: this node's id among the nodes of its cluster
``AWS_LAMBDA_FUNCTION_NAME``      (set by Lambda) names the checkpoints' emitter where no node does
``SRM_API_URL``                   the metrics API's base URL, advertised by topic sync (remote querying)
``SRM_DEPLOYMENT_NAME``           the name it is advertised under unless ``metrics.api.deployment.name`` says
``SRM_DEAD_LETTER_BUCKET``        the S3 bucket of records the target refused (``errors.tolerance = all``) …
``SRM_DEAD_LETTER_DIR``           … or, locally, the directory they go to
``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``   where DynamoDB is (boto3 reads them)
================================  =====================================================================
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import boto3
from botocore.config import Config
from confluent_kafka import Producer

from srm.aws.api_client import PeerApiClient
from srm.aws.config_table import ConfigStore
from srm.aws.dead_letters import S3DeadLetters
from srm.aws.firehose import FirehoseSink
from srm.aws.lambda_mappings import LambdaEventSources
from srm.aws.metrics_table import MetricsTable
from srm.aws.nodes import Nodes
from srm.aws.secrets import DEFAULT_SECRETS_MAX_AGE, secrets_manager_resolver
from srm.aws.state import StateStore
from srm.config.settings import FlowSettings, SrmConfig
from srm.control.metrics import Deployment
from srm.control.remote import AdvertContext, Gateway, deployment
from srm.core.dead_letters import DeadLetters
from srm.core.loops import mirror_skips
from srm.core.source_offsets import offsets_topic
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.acls import TopicAcls
from srm.kafka.admin import RemoteTopics, ensure_topic, max_message_bytes
from srm.kafka.adverts import ADVERTS_TOPIC, read_adverts
from srm.kafka.clients import KafkaClients, build, consumer_config, producer_config
from srm.kafka.raw_metrics import KafkaSink
from srm.kafka.readers import quiet_probe
from srm.kafka.transactions import TransactionalProducers
from srm.metrics.sinks import Emitter, FileSink, MetricsEmitter, NullEmitter
from srm.mm2.policy import ReplicationPolicy
from srm.replication.checkpoint import CheckpointContext
from srm.replication.context import MirrorContext, StateWriters, TopicNotReplicatedError
from srm.replication.continuity import log_end_lookup, topic_id_lookup
from srm.replication.dead_letters import DirectoryDeadLetters, MessageSizeLimits, NoDeadLetters
from srm.replication.delivery import offset_syncs_topic
from srm.replication.exactly_once import ExactlyOnce
from srm.replication.heartbeat import HeartbeatContext
from srm.replication.mappings import EventSourceMappings
from srm.replication.mirror import log_start_lookup
from srm.replication.takeover import Takeover
from srm.replication.topic_sync import SeenOnce, TopicSyncContext

__all__ = ["App", "Environment", "secrets_manager_resolver"]


@dataclass(frozen=True)
class Environment:
    source: str | None
    target: str | None
    config_table: str = "srm-config"
    state_table: str = "srm-state"
    metrics_table: str = "srm-metrics"
    config_cache_seconds: float = 10.0
    secrets_cache_seconds: float = DEFAULT_SECRETS_MAX_AGE
    region: str = "us-east-1"
    mirror_function: str | None = None  # with source_cluster_arn: event source mappings through the Lambda API
    source_cluster_arn: str | None = None
    source_auth: tuple[str, str] | None = None  # how the mappings authenticate (SRM_SOURCE_AUTH, _SECRET_ARN)
    mapping_failure_destination: str | None = None  # where mappings send batches they give up on (dead-letter)
    metrics_stream: str | None = None  # raw metrics to this Firehose stream …
    metrics_dir: str | None = None  # … or, locally, into files under this folder …
    metrics_topic: str | None = None  # … or into this topic of the store cluster; none of them: none are emitted
    store_cluster: str | None = None  # the cluster holding an srm run cluster's state (and metrics topic)
    node_id: str | None = None  # the local runtime's node (else the Lambda function is the emitter of checkpoints)
    function_name: str | None = None
    api_url: str | None = None  # this deployment's metrics API, advertised to peers (remote querying)
    deployment: str | None = None  # its default name (else the region)
    dead_letter_bucket: str | None = None  # records the target refuses go to this bucket …
    dead_letter_dir: str | None = None  # … or, locally, this folder; neither: such a record fails its batch

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        try:
            cache = float(env.get("SRM_CONFIG_CACHE_SECONDS", "10"))
        except ValueError:
            raise ConfigError("SRM_CONFIG_CACHE_SECONDS must be a number of seconds") from None
        try:
            secrets_cache = float(env.get("SRM_SECRETS_CACHE_SECONDS", str(DEFAULT_SECRETS_MAX_AGE)))
        except ValueError:
            raise ConfigError("SRM_SECRETS_CACHE_SECONDS must be a number of seconds") from None
        return cls(
            source=env.get("SRM_SOURCE") or None,
            target=env.get("SRM_TARGET") or None,
            config_table=env.get("SRM_CONFIG_TABLE", "srm-config"),
            state_table=env.get("SRM_STATE_TABLE", "srm-state"),
            metrics_table=env.get("SRM_METRICS_TABLE", "srm-metrics"),
            config_cache_seconds=cache,
            secrets_cache_seconds=secrets_cache,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            mirror_function=env.get("SRM_MIRROR_FUNCTION") or None,
            source_cluster_arn=env.get("SRM_SOURCE_CLUSTER_ARN") or None,
            source_auth=_source_auth(env.get("SRM_SOURCE_AUTH", ""), env.get("SRM_SOURCE_SECRET_ARN", "")),
            mapping_failure_destination=env.get("SRM_MAPPING_FAILURE_DESTINATION") or None,
            metrics_stream=env.get("SRM_METRICS_STREAM") or None,
            metrics_dir=env.get("SRM_METRICS_DIR") or None,
            metrics_topic=env.get("SRM_METRICS_TOPIC") or None,
            store_cluster=env.get("SRM_STORE_CLUSTER") or None,
            node_id=env.get("SRM_NODE_ID") or None,
            function_name=env.get("AWS_LAMBDA_FUNCTION_NAME") or None,
            api_url=(env.get("SRM_API_URL") or "").rstrip("/") or None,
            deployment=env.get("SRM_DEPLOYMENT_NAME") or None,
            dead_letter_bucket=env.get("SRM_DEAD_LETTER_BUCKET") or None,
            dead_letter_dir=env.get("SRM_DEAD_LETTER_DIR") or None,
        )

    def flow(self) -> Flow:
        if not self.source or not self.target:
            raise ConfigError("SRM_SOURCE and SRM_TARGET must name the flow's clusters (a stack per flow)")
        return Flow(self.source, self.target)


# what Lambda accepts for an MSK event source (SASL_SCRAM_256_AUTH is for self-managed Kafka only)
_MAPPING_AUTH = ("SASL_SCRAM_512_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH")


def _source_auth(kind: str, secret_arn: str) -> tuple[str, str] | None:
    """How the event source mappings authenticate to the source: IAM (or nothing) unless a secret is named."""
    if kind in ("", "IAM", "NONE"):
        return None
    if kind not in _MAPPING_AUTH or not secret_arn:
        raise ConfigError(f"SRM_SOURCE_AUTH={kind!r} needs one of {', '.join(_MAPPING_AUTH)} and SRM_SOURCE_SECRET_ARN")
    return kind, secret_arn


class _Bound(NamedTuple):
    flow: Flow
    config: SrmConfig
    settings: FlowSettings
    policy: ReplicationPolicy


class App:
    """Per-container wiring. ``App.current()`` is what handlers use; tests build their own."""

    _current: App | None = None
    _current_lock = threading.Lock()
    _bound: ContextVar[App | None] = ContextVar("srm_app", default=None)

    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        self.env = env
        self.dynamodb = dynamodb or boto3.client(
            "dynamodb", region_name=env.region, config=Config(retries={"max_attempts": 5, "mode": "standard"})
        )
        self.config_store = ConfigStore(self.dynamodb, env.config_table, env.config_cache_seconds)
        self.state = StateStore(self.dynamodb, env.state_table)
        self.metrics_table = MetricsTable(self.dynamodb, env.metrics_table)
        self.kafka = KafkaClients(secrets_manager_resolver(env.region, env.secrets_cache_seconds))
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
                env.mapping_failure_destination,
            )
        self._topic_acls: dict[Flow, TopicAcls] = {}
        self._state_writers = StateWriters()
        self._transactions: dict[Flow, ExactlyOnce] = {}
        self._refusals_warned = SeenOnce()
        self._lock = threading.Lock()
        self._gateway: Gateway | None = None
        self.metrics = self._metrics_emitter()
        self.dead_letters = self._dead_letters()
        self._size_limits: dict[Flow, MessageSizeLimits] = {}

    def _dead_letters(self) -> DeadLetters:
        if self.env.dead_letter_bucket:
            client = boto3.client("s3", region_name=self.env.region, config=Config(retries={"mode": "standard"}))
            return S3DeadLetters(client, self.env.dead_letter_bucket)
        if self.env.dead_letter_dir:
            return DirectoryDeadLetters(Path(self.env.dead_letter_dir))
        return NoDeadLetters()

    def _message_size_limits(self, flow: Flow) -> MessageSizeLimits:
        def lookup(topic: str) -> int:  # with the target admin of the current configuration
            return max_message_bytes(self.kafka.admin(self.config(), flow.target, flow), topic)

        with self._lock:
            return self._size_limits.setdefault(flow, MessageSizeLimits(lookup))

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

    @classmethod
    def current(cls) -> App:
        bound = cls._bound.get()
        if bound is not None:
            return bound
        with cls._current_lock:
            if cls._current is None:
                cls._current = cls(Environment.from_env())
            return cls._current

    @classmethod
    def reset(cls) -> None:
        """Forget the per-container app (tests; a new environment)."""
        with cls._current_lock:
            cls._current = None

    @classmethod
    @contextmanager
    def serving(cls, app: App) -> Iterator[App]:
        """``current()`` is ``app`` in this thread meanwhile: several deployments' APIs in one test process."""
        token = cls._bound.set(app)
        try:
            yield app
        finally:
            cls._bound.reset(token)

    def config(self) -> SrmConfig:
        return self.config_store.load()

    def nodes(self, config: SrmConfig) -> Nodes:
        """The nodes of this ``srm run`` cluster, as the state records them."""
        return Nodes(self.dynamodb, self.env.state_table, config.nodes().group_id)

    def deployment(self, config: SrmConfig, request_url: str | None = None) -> Deployment:
        """This deployment as its metrics API advertises it (remote querying)."""
        env = self.env
        return deployment(config, env_name=env.deployment, url=env.api_url, region=env.region, request_url=request_url)

    def gateway(self) -> Gateway:
        """The metrics API's remote querying, once per container (it caches peers and owners)."""
        with self._lock:
            if self._gateway is None:
                client = PeerApiClient()
                resolver = self.kafka.resolver
                self._gateway = Gateway(lambda c, alias, t: read_adverts(c, alias, t, resolver), client.get)
            return self._gateway

    def advert_context(self) -> AdvertContext | None:
        """Topic sync's advert of this deployment's metrics API on the flow's target; None without an API URL."""
        if self.env.api_url is None:
            return None
        flow, config, settings, _ = self._bind()
        self.ensure_internal_topic(config, flow.target, ADVERTS_TOPIC, settings.checkpoints_topic_replication_factor)
        producer = self.kafka.producer(
            config, flow.target, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="adverts"
        )
        return AdvertContext(self.deployment(config), producer, min(30.0, settings.mirror_delivery_timeout_ms / 1000.0))

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
        source_admin = self.kafka.admin(config, source, flow)
        target_admin = self.kafka.admin(config, target, flow)
        return TopicSyncContext(
            source=source,
            target=target,
            settings=settings,
            policy=policy,
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
            emitter=self.env.node_id or self.env.function_name or "",
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
        exactly_once = self._exactly_once(config, flow, settings) if settings.exactly_once else None
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
            exactly_once=exactly_once,
            dead_letters=self.dead_letters,
            max_message_bytes=self._message_size_limits(flow),
            forget_remote_topic=remote_topics.forget,
        )

    def _exactly_once(self, config: SrmConfig, flow: Flow, settings: FlowSettings) -> ExactlyOnce:
        """The flow's transactions, kept for the container's life (its producers and the offsets they committed),
        set to the current configuration: a changed one re-initializes each producer on its next use."""
        source, target = flow
        topic = offsets_topic(source)
        self.ensure_internal_topic(config, target, topic, settings.offset_syncs_topic_replication_factor)
        delivery_ms = settings.mirror_delivery_timeout_ms
        producer = producer_config(config, target, flow, delivery_timeout_ms=delivery_ms, resolver=self.kafka.resolver)
        # A crashed container's open transactions hold back every read_committed reader of the offsets topic until
        # the broker aborts them: one transaction timeout after the crash. A batch needs at most the delivery timeout
        # and its commit, so the timeout is that and 10 s, keeping the stall after a crash that short.
        producer.setdefault("transaction.timeout.ms", str(delivery_ms + 10_000))
        reader = consumer_config(config, target, flow, group_id="srm-exactly-once", resolver=self.kafka.resolver)
        with self._lock:
            eos = self._transactions.get(flow)
            if eos is None:
                producers = TransactionalProducers(lambda conf: build(Producer, conf, config, target, "producer"))
                eos = self._transactions[flow] = ExactlyOnce(source, target, topic, producers)
            eos.configure(producer, reader, delivery_ms / 1000.0)
            return eos
