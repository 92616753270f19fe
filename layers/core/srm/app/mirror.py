"""The mirror function's wiring: its context, with the flow's transactions (exactly once), the remote topics' size
limits and where refused records go, each kept for the container's life."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from confluent_kafka import Producer

from srm.app.base import AppBase
from srm.app.environment import Environment
from srm.aws.dead_letters import S3DeadLetters
from srm.config.settings import FlowSettings, SrmConfig
from srm.core.dead_letters import DeadLetters
from srm.core.source_offsets import offsets_topic
from srm.flow import Flow
from srm.kafka.admin import max_message_bytes
from srm.kafka.clients import build, consumer_config, producer_config
from srm.kafka.transactions import TransactionalProducers
from srm.replication.context import MirrorContext, StateWriters, TopicNotReplicatedError
from srm.replication.continuity import log_end_lookup, topic_id_lookup
from srm.replication.dead_letters import DirectoryDeadLetters, MessageSizeLimits, NoDeadLetters
from srm.replication.delivery import offset_syncs_topic
from srm.replication.exactly_once import ExactlyOnce
from srm.replication.mirror import log_start_lookup

__all__ = ["MirrorWiring"]


class MirrorWiring(AppBase):
    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        super().__init__(env, dynamodb)
        self._state_writers = StateWriters()
        self._transactions: dict[Flow, ExactlyOnce] = {}
        self._size_limits: dict[Flow, MessageSizeLimits] = {}
        self.dead_letters = self._dead_letters()

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

    def mirror_context(self) -> MirrorContext:
        """The mirror's dependencies for this container's flow, with the current (cached) configuration."""
        bound = self._bind()
        flow, config, settings, policy = bound
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
            **bound.context_fields(),
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
            transforms=config.transforms(source, target),
        )

    def partitions_assigned(self, topic: str, partitions: list[int]) -> None:
        """A local event source was given these partitions of ``topic``: their state is claimed (earlier holders
        fenced, what they wrote read), and an exactly-once flow readies their transactions, now rather than in
        their first batch (:meth:`ExactlyOnce.warm`). Lambda has no such moment: there the first batch does both."""
        flow, config, settings, policy = self._bind()
        if partitions:
            self.state.claim_partitions(flow.source, flow.target, topic, partitions)
        if settings.exactly_once and partitions:
            remote = policy.format_remote_topic(flow.source, topic)
            self._exactly_once(config, flow, settings).warm(topic, remote, partitions)

    def partitions_revoked(self, topic: str, partitions: list[int]) -> None:
        """A local event source gave these partitions of ``topic`` up cleanly: their state is released."""
        source, target = self.env.flow()
        self.state.release_partitions(source, target, topic, partitions)

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
