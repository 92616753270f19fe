"""The event-source-mapping port in the local runtime, and the mappings each node runs.

As on AWS, a mapping is a record (the state table's ``esm`` items, written by topic sync through
:func:`srm.replication.mappings.sync_mappings`) and its pollers run elsewhere: here, in every node's worker of the
flow. :class:`LocalEventSources` is the port topic sync (on the flow's leader) calls: it follows the decisions of
:func:`srm.core.plans.decide_mappings` like the Lambda API adapter does, as records — a disabled mapping keeps its
record (its consumer group keeps the offsets), a deleted one is forgotten, an update changes its settings.
:meth:`LocalEventSources.follow` then makes the node's running :class:`EmulatedMapping` threads match the records:
one per enabled mapping, each a member of the mapping's consumer group (``group.instance.id``: the node's id), so the
nodes share each topic's partitions; a thread that died is started again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import AdminClient

from srm.config.nodes import node_of
from srm.config.settings import FlowSettings, SrmConfig
from srm.core.events import local_event_source_arn
from srm.core.plans import MappingConfig, ObservedMapping, mapping_group_id
from srm.flow import Flow
from srm.kafka.clients import consumer_config
from srm.local.event_source import EmulatedMapping, GroupMember, MappingSettings
from srm.state import EventSourceMappingRecord

if TYPE_CHECKING:
    from srm.app import App

__all__ = ["LocalEventSources", "static_members"]

log = logging.getLogger(__name__)


@dataclass
class _Running:
    config: MappingConfig
    thread: EmulatedMapping


class LocalEventSources:
    """The emulated MSK event source mappings of one flow on this node, invoking ``handler`` (the mirror's
    ``lambda_handler``) as member ``member_id`` of each mapping's group."""

    def __init__(
        self,
        app: App,
        handler: Callable[[dict[str, Any], Any], Any],
        member_id: str,
        session_timeout_ms: int = 10_000,
    ) -> None:
        self._app = app
        self._handler = handler
        self.member_id = member_id
        self.session_timeout_ms = session_timeout_ms
        self._running: dict[str, _Running] = {}  # topic → its mapping on this node
        self._lock = threading.Lock()

    # -- the port (topic sync, on the flow's leader): mappings as records --------------------------------------------
    def desired_config(self, settings: FlowSettings) -> MappingConfig:
        return MappingConfig(
            settings.event_source_batch_size,
            settings.event_source_batching_window_ms,
            settings.event_source_max_payload_bytes,
        )

    def observe(self, source: str, target: str) -> list[ObservedMapping]:
        return [_observed(r) for r in self._app.state.event_source_mappings(source, target).values()]

    def create(self, source: str, target: str, topic: str, config: MappingConfig) -> ObservedMapping:
        return ObservedMapping(f"local-{uuid.uuid4()}", topic, config, enabled=True)

    def update(self, source: str, target: str, mapping: ObservedMapping, config: MappingConfig) -> ObservedMapping:
        return ObservedMapping(mapping.id, mapping.topic, config, enabled=True)

    def disable(self, source: str, target: str, mapping: ObservedMapping) -> ObservedMapping:
        log.info("stopped replicating %s (no longer selected by %s->%s)", mapping.topic, source, target)
        return ObservedMapping(mapping.id, mapping.topic, mapping.config, enabled=False)

    def delete(self, source: str, target: str, mapping: ObservedMapping) -> bool:
        log.info("removed the mapping of %s (%s->%s): the topic is gone", mapping.topic, source, target)
        return True

    # -- this node's mappings ------------------------------------------------------------------------------------
    def follow(self, records: Mapping[str, EventSourceMappingRecord]) -> None:
        """Run one mapping per enabled record, with its settings; stop the others."""
        source, target = self._app.env.flow()
        wanted = {topic: _observed(r).config for topic, r in records.items() if r.enabled}
        with self._lock:
            running = dict(self._running)
        for topic, mapping in running.items():
            if mapping.thread.fenced is not None:
                continue  # kept for the worker to see (it stops the node): a new one would fence the one that took over
            if wanted.get(topic) != mapping.config or not mapping.thread.is_alive():
                self._stop(topic)
        for topic, config in wanted.items():
            with self._lock:
                if topic in self._running:
                    continue
            thread = self._start(source, target, topic, config)
            with self._lock:
                self._running[topic] = _Running(config, thread)

    def mappings(self) -> dict[str, EmulatedMapping]:
        """The mappings running on this node, by topic (status reports, the watchdog)."""
        with self._lock:
            return {topic: m.thread for topic, m in self._running.items()}

    def stop_all(self, timeout: float = 5.0) -> None:
        with self._lock:
            threads = [m.thread for m in self._running.values()]
            self._running.clear()
        for t in threads:
            t.stop()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def _stop(self, topic: str) -> None:
        with self._lock:
            mapping = self._running.pop(topic, None)
        if mapping is not None:
            mapping.thread.stop()
            mapping.thread.join(timeout=5)

    def _start(self, source: str, target: str, topic: str, config: MappingConfig) -> EmulatedMapping:
        srm_config: SrmConfig = self._app.config()
        group = mapping_group_id(source, target, topic)
        conf = consumer_config(
            srm_config, source, Flow(source, target), group_id=group, resolver=self._app.kafka.resolver
        )
        # A static member per node: a restarted node's consumer takes its place (and its partitions) back at once,
        # where a dynamic one would wait for the broker to expire the dead one. Nodes share the partitions; a
        # cooperative assignor moves only those that change hands when a node joins or leaves.
        conf["group.instance.id"] = self.member_id
        conf.setdefault("client.id", f"srm-{self.member_id}")
        conf.setdefault("partition.assignment.strategy", "cooperative-sticky")
        conf.setdefault("session.timeout.ms", str(self.session_timeout_ms))
        conf.setdefault("heartbeat.interval.ms", str(max(500, self.session_timeout_ms // 5)))
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
            group_members=self._group_assignment,
            on_assigned=lambda partitions: self._app.partitions_assigned(topic, partitions),
            on_revoked=lambda partitions: self._app.partitions_revoked(topic, partitions),
        )
        mapping.start()
        log.info("replicating %s (%s->%s)", topic, source, target)
        return mapping

    def _group_assignment(self, group: str) -> dict[str, GroupMember]:
        """The members of a mapping's group that are nodes of this cluster (this one included), by node id.
        Partitions another consumer holds are assigned to no node."""
        flow = self._app.env.flow()
        config = self._app.config()
        now = int(time.time() * 1000)
        nodes = {n for n, r in self._app.nodes(config).nodes().items() if r.alive(now)} | {node_of(self.member_id)}
        members = static_members(self._app.kafka.admin(config, flow.source, flow), group)
        return {member_id: member for member_id, member in members.items() if node_of(member_id) in nodes}


def static_members(admin: AdminClient, group: str) -> dict[str, GroupMember]:
    """The static members of ``group``, by ``group.instance.id``."""
    found = admin.describe_consumer_groups([group], request_timeout=5)[group].result()
    return {
        m.group_instance_id: GroupMember(
            f"{m.client_id}@{m.host.lstrip('/')}",
            tuple(sorted(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else []))),
            m.member_id,
        )
        for m in found.members
        if m.group_instance_id
    }


def _observed(record: EventSourceMappingRecord) -> ObservedMapping:
    return ObservedMapping(
        record.id,
        record.topic,
        MappingConfig(record.batch_size, record.batching_window_ms, record.max_payload_bytes),
        enabled=record.enabled,
    )
