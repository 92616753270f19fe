"""An emulated event source mapping on a test broker, recording what it delivers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from srm.core.events import parse_event
from srm.local.event_source import EmulatedMapping, GroupMember, MappingSettings
from srm.local.mappings import static_members
from tests.support.kafka import admin


class Recorder:
    """A handler that keeps every delivered record as (partition, offset, value); a call waits while ``gate`` is
    clear (a handler stuck in a call)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[int, int, bytes]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, event: Any, _context: Any) -> None:
        self.gate.wait()
        for batch in parse_event(event)[1]:  # the JSON event or the decoded one
            for offset, value in zip(batch.offsets, batch.values, strict=True):
                self.delivered.append((batch.partition, offset, value or b""))


@contextlib.contextmanager
def running_mapping(
    bootstrap: str,
    topic: str,
    group: str,
    settings: MappingSettings,
    *,
    static: bool = False,
    assignor: str | None = None,
) -> Iterator[tuple[EmulatedMapping, Recorder]]:
    """A started mapping of ``topic`` in ``group`` (a static member when ``static``, which asks the group who holds
    its id once fenced; ``assignor``: the group's ``partition.assignment.strategy``), stopped on exit."""
    recorder = Recorder()
    consumer_config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
    }
    if assignor is not None:
        consumer_config["partition.assignment.strategy"] = assignor
    if static:
        consumer_config["group.instance.id"] = group
        consumer_config["session.timeout.ms"] = 6000  # the broker's least: a fenced member asks the group that long
    m = EmulatedMapping(
        name=topic,
        topic=topic,
        consumer_config=consumer_config,
        handler=recorder,
        function_name="mirror",
        source_arn="arn:aws:kafka:local:000000000000:cluster/a/0",
        bootstrap_servers=bootstrap,
        settings=settings,
        group_members=(lambda g: group_members(bootstrap, g)) if static else None,
    )
    m.start()
    try:
        yield m, recorder
    finally:
        m.stop()
        m.join(10)


def group_members(bootstrap: str, group: str) -> dict[str, GroupMember]:
    """The static members of ``group`` by group.instance.id."""
    return static_members(admin(bootstrap), group)
