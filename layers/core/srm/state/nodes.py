"""The nodes of an ``srm run`` cluster and what each holds: the records and the port (:class:`Nodes`) the runtime,
``srm-control`` and the metrics API read and write them through. Adapters: the state table
(:class:`srm.aws.nodes.DynamoDBNodes`, ``srm run --endpoint-url``) and the state topic
(:class:`srm.kafka.nodes.KafkaNodes`, the default).

A node writes its record when it starts and again every few seconds (``seen_ms``): one not seen for
:data:`NODE_EXPIRY_MS` is gone. ``token`` is the incarnation (a new one at every start). A flow's worker on the node
writes its member record: whether it is the flow's leader, the partitions it holds, its last rebalance, and, once
fenced, by whom. Each record has one writer: its node, or its node's member of the flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["NODE_EXPIRY_MS", "MemberRecord", "NodeRecord", "Nodes"]

NODE_EXPIRY_MS = 8_000  # four missed heartbeats (every 2 s)


@dataclass(frozen=True)
class NodeRecord:
    node_id: str
    host: str
    pid: int
    run_dir: str
    token: str
    started_ms: int
    seen_ms: int

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.seen_ms < NODE_EXPIRY_MS

    def describe(self) -> str:
        return f"{self.node_id} (pid {self.pid} on {self.host}, in {self.run_dir})"


@dataclass(frozen=True)
class MemberRecord:
    node_id: str
    source: str
    target: str
    leader: bool
    partitions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    last_rebalance_ms: int = 0
    seen_ms: int = 0
    fenced_by: str = ""
    stalled: str = ""  # what the node's watchdog finds stuck (the flow status's ``stalled`` fact), kept beside it


class Nodes(Protocol):
    """The node and member records of one cluster of nodes (``group``); errors are
    :class:`~srm.state.records.StateError` (retriable)."""

    group: str

    def put_node(self, node: NodeRecord) -> None: ...

    def nodes(self, *, consistent: bool = False) -> dict[str, NodeRecord]:
        """Every node's record by id; ``consistent``: after everything written before this was asked."""

    def delete_node(self, node_id: str) -> None: ...

    def put_member(self, member: MemberRecord) -> None: ...

    def members(self, source: str, target: str) -> dict[str, MemberRecord]:
        """The member records of a flow by node id."""
