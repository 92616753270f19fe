"""The nodes of an ``srm run`` cluster as ``srm status``, ``srm-control status`` and the web view show them: each
node, whether it is alive, which flows it leads, the partitions it holds, its last rebalance."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from srm.config.nodes import node_of
from srm.flow import Flow
from srm.state.nodes import NODE_EXPIRY_MS, MemberRecord, NodeRecord, Nodes

__all__ = ["NodeStatus", "NodeView", "NodesStatus", "NodesView", "nodes_status"]


@dataclass(frozen=True)
class NodeStatus:
    record: NodeRecord  # as the node registered itself: host, pid, run directory, when it started and was last seen
    alive: bool
    leads: tuple[str, ...]  # flows it runs the scheduled functions of
    partitions: Mapping[str, Mapping[str, tuple[int, ...]]]  # flow → topic → partitions held
    last_rebalance_ms: int
    fenced_by: str = ""

    @property
    def node_id(self) -> str:
        return self.record.node_id

    @property
    def partition_count(self) -> int:
        return sum(len(p) for topics in self.partitions.values() for p in topics.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "host": self.record.host,
            "pid": self.record.pid,
            "runDirectory": self.record.run_dir,
            "started": _iso(self.record.started_ms),
            "lastSeen": _iso(self.record.seen_ms),
            "alive": self.alive,
            "leaderOf": list(self.leads),
            "partitions": {f: {t: list(p) for t, p in topics.items()} for f, topics in self.partitions.items()},
            "lastRebalance": _iso(self.last_rebalance_ms),
            **({"fencedBy": self.fenced_by} if self.fenced_by else {}),
        }


@dataclass(frozen=True)
class NodesStatus:
    group: str
    nodes: tuple[NodeStatus, ...]
    leaders: Mapping[str, str | None]  # flow → the node leading it (None: no live leader)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "nodes": [n.to_dict() for n in self.nodes],
            "leaders": dict(self.leaders),
        }


class NodeView(BaseModel):
    """A node as the metrics API answers it."""

    node: str
    host: str
    pid: int
    runDirectory: str  # camelCase: the API's JSON names, as the other answers
    started: str | None
    lastSeen: str | None
    alive: bool
    leaderOf: list[str] = Field(description="flows whose scheduled functions it runs")
    partitions: dict[str, dict[str, list[int]]] = Field(description="flow → topic → partitions it holds")
    lastRebalance: str | None
    fencedBy: str | None = None


class NodesView(BaseModel):
    """The nodes of an ``srm run`` cluster (none for a deployment on AWS, where Lambda runs the functions)."""

    group: str
    nodes: list[NodeView]
    leaders: dict[str, str | None] = Field(description="flow → the node leading it (null: being elected)")

    @classmethod
    def of(cls, status: NodesStatus) -> NodesView:
        return cls.model_validate(status.to_dict())


def nodes_status(nodes: Nodes, flows: Iterable[Flow], now_ms: int | None = None) -> NodesStatus:
    """Every node recorded in the state (live ones first) with what its members hold; a node gone for good drops
    out once its item is removed (at a clean stop) — one that died stays, not alive, until it restarts."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    records = nodes.nodes()
    members: dict[str, list[MemberRecord]] = {}
    leaders: dict[str, str | None] = {}
    for flow in flows:
        leaders[str(flow)] = None
        for member in nodes.members(*flow).values():
            live = now - member.seen_ms < NODE_EXPIRY_MS
            node = node_of(member.node_id)  # a node's worker processes are members of their own (srm run --workers)
            if node not in records or not live:
                continue  # a member of a node gone: its partitions moved with its session
            members.setdefault(node, []).append(member)
            if member.leader and not member.fenced_by:
                leaders[str(flow)] = node
    found = [_node(r, members.get(r.node_id, []), now) for r in records.values()]
    found.sort(key=lambda n: (not n.alive, n.node_id))
    return NodesStatus(nodes.group, tuple(found), leaders)


def _node(record: NodeRecord, members: list[MemberRecord], now: int) -> NodeStatus:
    return NodeStatus(
        record=record,
        alive=record.alive(now),
        leads=tuple(sorted(str(Flow(m.source, m.target)) for m in members if m.leader and not m.fenced_by)),
        partitions=_held(members),
        last_rebalance_ms=max([m.last_rebalance_ms for m in members] + [0]),
        fenced_by=next((m.fenced_by for m in members if m.fenced_by), ""),
    )


def _held(members: list[MemberRecord]) -> dict[str, dict[str, tuple[int, ...]]]:
    """What a node's members hold, per flow and topic (several worker processes of a flow: together)."""
    held: dict[str, dict[str, tuple[int, ...]]] = {}
    for m in members:
        flow = held.setdefault(str(Flow(m.source, m.target)), {})
        for topic, partitions in m.partitions.items():
            flow[topic] = tuple(sorted({*flow.get(topic, ()), *partitions}))
    return {flow: topics for flow, topics in held.items() if topics}


def _iso(ms: int) -> str | None:
    if not ms:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
