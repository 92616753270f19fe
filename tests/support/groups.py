"""Consumer groups as tests see them: who holds which partitions, and members that are no part of srm (what takes
partitions away from a mapping)."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition

from tests.support.kafka import admin


def group_holdings(bootstrap: str, group: str) -> dict[str, set[int]] | None:
    """A stable group's members (static id, else member id) and the partitions each holds; None while it is not
    stable."""
    described = admin(bootstrap).describe_consumer_groups([group])[group].result(timeout=10)
    if described.state != ConsumerGroupState.STABLE:
        return None
    return {
        m.group_instance_id or m.member_id: {tp.partition for tp in m.assignment.topic_partitions}
        for m in described.members
    }


class Squatter:
    """A consumer of ``group`` that polls and never commits: it holds whatever it is assigned until it leaves.
    ``assignor``: the group's ``partition.assignment.strategy`` where its members use another than the client's
    default (the group would refuse the squatter otherwise); ``config``: more consumer settings."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, assignor: str | None = None, config: dict[str, Any] | None = None
    ) -> None:
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 0,
            **(config or {}),
        }
        if assignor is not None:
            settings["partition.assignment.strategy"] = assignor
        self.consumer = Consumer(settings)
        self.consumer.subscribe([topic])
        self.partitions: list[int] = []
        self._commits: list[list[TopicPartition]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)
            self.partitions = [tp.partition for tp in self.consumer.assignment()]  # on the polling thread only
            while self._commits:
                self.consumer.commit(offsets=self._commits.pop(0), asynchronous=False)

    def commit(self, offsets: list[TopicPartition]) -> None:
        """Commit ``offsets`` as this member (any partitions: the group checks the member, not what it holds), on its
        polling thread: a consumer's calls do not overlap."""
        self._commits.append(offsets)

    def assigned(self) -> list[int]:
        return self.partitions

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
