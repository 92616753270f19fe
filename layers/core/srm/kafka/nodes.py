"""The nodes of an ``srm run`` cluster (:class:`srm.state.nodes.Nodes`) in its state topic, beside the state
(:class:`srm.kafka.state.KafkaState`):

=================================  ==========================================================================
key                                value
=================================  ==========================================================================
``["node", node id]``              ``{"h": host, "pid", "dir": run directory, "tok", "st": start, "seen"}``
``["member", src, tgt, node id]``  ``{"lead", "parts": {topic: [partitions]}, "reb", "seen", "fenced", "stl"}``
=================================  ==========================================================================

(the fields as :mod:`srm.state.nodes` names them; times in epoch ms)

Each record has one writer (its node, or its node's member of the flow), which writes it with its process's
idempotent producer.
"""

from __future__ import annotations

from srm.kafka.state import KafkaState
from srm.state.nodes import MemberRecord, NodeRecord

__all__ = ["KafkaNodes"]


class KafkaNodes:
    def __init__(self, state: KafkaState, group: str) -> None:
        self._state = state
        self.group = group

    def put_node(self, node: NodeRecord) -> None:
        value = {
            "h": node.host,
            "pid": node.pid,
            "dir": node.run_dir,
            "tok": node.token,
            "st": node.started_ms,
            "seen": node.seen_ms,
        }
        self._state.log.write([(("node", node.node_id), value)])

    def nodes(self, *, consistent: bool = False) -> dict[str, NodeRecord]:
        if consistent:
            self._state.catch_up()
        return {
            node_id: NodeRecord(node_id, v["h"], int(v["pid"]), v["dir"], v["tok"], int(v["st"]), int(v["seen"]))
            for node_id, v in self._state.items("node")
        }

    def delete_node(self, node_id: str) -> None:
        self._state.log.write([(("node", node_id), None)])

    def put_member(self, member: MemberRecord) -> None:
        value = {
            "lead": member.leader,
            "parts": {t: list(p) for t, p in sorted(member.partitions.items())},
            "reb": member.last_rebalance_ms,
            "seen": member.seen_ms,
            **({"fenced": member.fenced_by} if member.fenced_by else {}),
            **({"stl": member.stalled} if member.stalled else {}),
        }
        self._state.log.write([(("member", member.source, member.target, member.node_id), value)])

    def members(self, source: str, target: str) -> dict[str, MemberRecord]:
        return {
            node_id: MemberRecord(
                node_id=node_id,
                source=source,
                target=target,
                leader=bool(v["lead"]),
                partitions={t: tuple(p) for t, p in v["parts"].items()},
                last_rebalance_ms=int(v["reb"]),
                seen_ms=int(v["seen"]),
                fenced_by=v.get("fenced", ""),
                stalled=v.get("stl", ""),
            )
            for node_id, v in self._state.items("member", source, target)
        }
