"""Which node runs a flow's scheduled functions (topic sync, heartbeats, checkpoints): its elected leader.

Every node's worker of a flow is a member of the consumer group ``srm-leader.<group id>.<source>-><target>`` where
the nodes' state is, subscribed to the state's one-partition topic (never read: its partition is paused); with the
state elsewhere (a DynamoDB endpoint), on the flow's target, subscribed to ``srm-nodes.<group id>.internal``. The
member the group assigns that partition leads. Kafka's group protocol gives the
partition to one member at a time; with the cooperative assignor the leader keeps it while it lives, and gives it up
— after its running functions finished (:attr:`Leadership.on_deposed` runs in the revocation) — before another
member gets it. A leader that dies loses it when its session expires (``nodes.session.timeout.ms``); one that stops
cleanly leaves the group at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

__all__ = ["Leadership", "leader_group", "nodes_topic"]

log = logging.getLogger(__name__)


def nodes_topic(group_id: str) -> str:
    return f"srm-nodes.{group_id}.internal"


def leader_group(group_id: str, source: str, target: str) -> str:
    return f"srm-leader.{group_id}.{source}->{target}"


class Leadership:
    """This worker's membership of its flow's leader group, on a thread of its own."""

    def __init__(
        self,
        consumer_config: dict[str, Any],
        topic: str,
        group: str,
        *,
        session_timeout_ms: int,
        name: str,
        on_elected: Callable[[], None] | None = None,
        on_deposed: Callable[[], None] | None = None,
        ensure_topic: Callable[[], None] | None = None,
    ) -> None:
        self._conf = {
            **consumer_config,
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": str(session_timeout_ms),
            "heartbeat.interval.ms": str(max(300, session_timeout_ms // 10)),
            "auto.offset.reset": "latest",
            "enable.auto.commit": "false",
        }
        self._conf.pop("group.instance.id", None)  # dynamic: a clean stop leaves the group at once
        self.topic = topic
        self.group = group
        self.name = name
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.ensure_topic = ensure_topic  # makes the topic if it is missing (retried until it succeeds)
        self._leader = threading.Event()
        # Held while a function is started on the strength of leading, and while stepping down: no function starts
        # after the leadership is given up.
        self.guard = threading.Lock()
        self.elected_at_ms = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"leader:{name}", daemon=True)

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer = None
            try:
                if self.ensure_topic is not None:
                    self.ensure_topic()
                    self.ensure_topic = None
                consumer = Consumer(self._conf)
                consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
                while not self._stop.is_set():
                    consumer.poll(0.5)
                    assignment = consumer.assignment()
                    if assignment:
                        consumer.pause(assignment)  # a token, not a topic to read
            except Exception as e:  # a broken consumer is replaced: its leadership, if any, ends first
                log.error("%s: leader election failed, joining again: %s", self.name, e)
                self._step_down("its consumer failed")
                self._stop.wait(5.0)
            finally:
                if consumer is not None:
                    consumer.close()  # leaves the group: the revocation below runs first
                self._step_down("it stopped")

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.partition == 0 for tp in partitions) and not self.is_leader:
            self.elected_at_ms = int(time.time() * 1000)
            self._leader.set()
            log.info("%s: this node leads: it runs the flow's scheduled functions", self.name)
            if self.on_elected is not None:
                self.on_elected()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.partition == 0 for tp in partitions):
            self._step_down("it stops" if self._stop.is_set() else "the group gave the leadership to another member")

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(tp.partition == 0 for tp in partitions):
            self._step_down("its session expired")

    def _step_down(self, why: str) -> None:
        if not self.is_leader:
            return
        with self.guard:
            self._leader.clear()
        log.info("%s: this node no longer leads (%s)", self.name, why)
        if self.on_deposed is not None:
            self.on_deposed()  # waits for the running functions: the partition moves only after
