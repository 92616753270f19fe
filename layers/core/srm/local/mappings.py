"""The event-source-mapping port in the local runtime: one :class:`EmulatedMapping` thread per topic.

It follows the decisions of :func:`srm.aws.lambda_mappings.decide_mappings` like the Lambda API adapter does: a
disabled mapping is a stopped thread whose record is kept (its consumer group keeps the offsets), a deleted
mapping is forgotten, an update restarts the thread with the new settings. A thread that died is reported as
disabled, so the next topic sync restarts it.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from srm.config.settings import FlowSettings, SrmConfig
from srm.core.events import local_event_source_arn
from srm.core.plans import MappingConfig, ObservedMapping, mapping_group_id
from srm.flow import Flow
from srm.kafka.clients import consumer_config
from srm.local.event_source import EmulatedMapping, MappingSettings

if TYPE_CHECKING:
    from srm.app import App

__all__ = ["LocalEventSources"]

log = logging.getLogger(__name__)


def _instance_id(group: str) -> str:
    """The group id itself when Kafka accepts it as a ``group.instance.id`` (up to 249 of ``[a-zA-Z0-9._-]``), else
    a digest of it: stable across restarts either way."""
    if len(group) <= 249 and re.fullmatch(r"[a-zA-Z0-9._-]+", group):
        return group
    return f"srm-mirror-{hashlib.sha256(group.encode()).hexdigest()}"


@dataclass
class _Local:
    id: str
    topic: str
    config: MappingConfig
    thread: EmulatedMapping | None  # None while disabled

    def observed(self) -> ObservedMapping:
        alive = self.thread is not None and self.thread.is_alive()
        return ObservedMapping(self.id, self.topic, self.config, enabled=alive)


class LocalEventSources:
    """Emulated MSK event source mappings of one flow, invoking ``handler`` (the mirror's ``lambda_handler``)."""

    def __init__(self, app: App, handler: Callable[[dict[str, Any], Any], Any]) -> None:
        self._app = app
        self._handler = handler
        self._mappings: dict[str, _Local] = {}  # id → mapping
        self._lock = threading.Lock()

    # -- the port ----------------------------------------------------------------------------------------------
    def desired_config(self, settings: FlowSettings) -> MappingConfig:
        return MappingConfig(
            settings.event_source_batch_size,
            settings.event_source_batching_window_ms,
            settings.event_source_max_payload_bytes,
        )

    def observe(self, source: str, target: str) -> list[ObservedMapping]:
        with self._lock:
            return [m.observed() for m in self._mappings.values()]

    def create(self, source: str, target: str, topic: str, config: MappingConfig) -> ObservedMapping:
        mapping = _Local(f"local-{uuid.uuid4()}", topic, config, None)
        mapping.thread = self._start(source, target, topic, config)
        with self._lock:
            self._mappings[mapping.id] = mapping
        return ObservedMapping(mapping.id, topic, config, enabled=True)

    def update(self, source: str, target: str, mapping: ObservedMapping, config: MappingConfig) -> ObservedMapping:
        local = self._get(mapping)
        self._stop(local)
        local.config = config
        local.thread = self._start(source, target, local.topic, config)
        return ObservedMapping(local.id, local.topic, config, enabled=True)

    def disable(self, source: str, target: str, mapping: ObservedMapping) -> ObservedMapping:
        local = self._get(mapping)
        self._stop(local)
        log.info("stopped replicating %s (no longer selected by %s->%s)", local.topic, source, target)
        return ObservedMapping(local.id, local.topic, local.config, enabled=False)

    def delete(self, source: str, target: str, mapping: ObservedMapping) -> bool:
        with self._lock:
            local = self._mappings.pop(mapping.id, None)
        if local is not None:
            self._stop(local)
            log.info("removed the mapping of %s (%s->%s): the topic is gone", local.topic, source, target)
        return True

    # -- the runtime -------------------------------------------------------------------------------------------
    def mappings(self) -> dict[str, EmulatedMapping]:
        """The running mappings by topic (status reports)."""
        with self._lock:
            return {m.topic: m.thread for m in self._mappings.values() if m.thread is not None}

    def stop_all(self, timeout: float = 5.0) -> None:
        with self._lock:
            threads = [m.thread for m in self._mappings.values() if m.thread is not None]
            self._mappings.clear()
        for t in threads:
            t.stop()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def _get(self, mapping: ObservedMapping) -> _Local:
        with self._lock:
            return self._mappings[mapping.id]

    @staticmethod
    def _stop(local: _Local) -> None:
        if local.thread is not None:
            local.thread.stop()
            local.thread.join(timeout=5)
            local.thread = None

    def _start(self, source: str, target: str, topic: str, config: MappingConfig) -> EmulatedMapping:
        srm_config: SrmConfig = self._app.config()
        group = mapping_group_id(source, target, topic)
        conf = consumer_config(
            srm_config, source, Flow(source, target), group_id=group, resolver=self._app.kafka.resolver
        )
        # A static member, one per group: a restarted worker's consumer takes the place (and the partitions) of the
        # one that died with it at once. A dynamic member would wait for the broker to expire the dead one
        # (session.timeout.ms, 45 s by default).
        conf["group.instance.id"] = _instance_id(group)
        # Lambda's poller follows partitions added to its topic; a consumer sees them at its next metadata refresh
        # (librdkafka: every 5 minutes), so refresh as often as topic-sync looks for new partitions.
        refresh_ms = int(srm_config.settings(source, target).refresh_topics_interval_seconds * 1000)
        conf.setdefault("topic.metadata.refresh.interval.ms", str(max(1000, min(refresh_ms, 300_000))))
        mapping = EmulatedMapping(
            name=f"esm:{topic}",
            topic=topic,
            consumer_config=conf,
            handler=self._handler,
            function_name=f"srm-{source}-{target}-mirror",
            source_arn=local_event_source_arn(source),
            bootstrap_servers=srm_config.bootstrap_servers(source) or "",
            settings=MappingSettings(config.batch_size, config.batching_window_ms, config.max_payload_bytes),
        )
        mapping.start()
        log.info("replicating %s (%s->%s)", topic, source, target)
        return mapping
