"""The nodes of an ``srm run`` cluster and what each holds, in the state table (``srm run --endpoint-url``).

==================================  ==================================  ========================================
item                                pk                                  sk / attributes
==================================  ==================================  ========================================
a node                              ``nodes#<group>``                   node id; h host, pid, dir, tok, st, seen
a node's member of a flow           ``members#<group>#<src>#<tgt>``     node id; lead, parts, reb, seen, fenced
==================================  ==================================  ========================================

A node writes its item when it starts and again every few seconds (``seen``, ms): one not seen for
:data:`NODE_EXPIRY_MS` is gone. ``tok`` is the incarnation (a new one at every start), ``st`` its start (ms). A flow's
worker on the node writes its member item: whether it is the flow's leader (``lead``), the partitions it holds
(``parts``: JSON, topic → partitions), its last rebalance (``reb``, ms), and, once fenced, by whom (``fenced``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from srm.state.nodes import MemberRecord, NodeRecord
from srm.state.records import StateError

__all__ = ["DynamoDBNodes"]


class DynamoDBNodes:
    """Node and member items of one cluster of nodes (``group``): the DynamoDB adapter of
    :class:`srm.state.nodes.Nodes`."""

    def __init__(self, client: Any, table: str, group: str) -> None:
        self._db = client
        self.table = table
        self.group = group

    def put_node(self, node: NodeRecord) -> None:
        self._put(
            {
                "pk": {"S": f"nodes#{self.group}"},
                "sk": {"S": node.node_id},
                "h": {"S": node.host},
                "pid": {"N": str(node.pid)},
                "dir": {"S": node.run_dir},
                "tok": {"S": node.token},
                "st": {"N": str(node.started_ms)},
                "seen": {"N": str(node.seen_ms)},
            }
        )

    def nodes(self, *, consistent: bool = False) -> dict[str, NodeRecord]:
        return {
            i["sk"]["S"]: NodeRecord(
                node_id=i["sk"]["S"],
                host=i["h"]["S"],
                pid=int(i["pid"]["N"]),
                run_dir=i["dir"]["S"],
                token=i["tok"]["S"],
                started_ms=int(i["st"]["N"]),
                seen_ms=int(i["seen"]["N"]),
            )
            for i in self._items(f"nodes#{self.group}", consistent)
        }

    def delete_node(self, node_id: str) -> None:
        with self._access("write"):
            self._db.delete_item(TableName=self.table, Key={"pk": {"S": f"nodes#{self.group}"}, "sk": {"S": node_id}})

    def put_member(self, member: MemberRecord) -> None:
        self._put(
            {
                "pk": {"S": f"members#{self.group}#{member.source}#{member.target}"},
                "sk": {"S": member.node_id},
                "lead": {"BOOL": member.leader},
                "parts": {"S": json.dumps({t: list(p) for t, p in sorted(member.partitions.items())})},
                "reb": {"N": str(member.last_rebalance_ms)},
                "seen": {"N": str(member.seen_ms)},
                **({"fenced": {"S": member.fenced_by}} if member.fenced_by else {}),
                **({"stl": {"S": member.stalled}} if member.stalled else {}),
            }
        )

    def members(self, source: str, target: str) -> dict[str, MemberRecord]:
        return {
            i["sk"]["S"]: MemberRecord(
                node_id=i["sk"]["S"],
                source=source,
                target=target,
                leader=i["lead"]["BOOL"],
                partitions={t: tuple(p) for t, p in json.loads(i["parts"]["S"]).items()},
                last_rebalance_ms=int(i["reb"]["N"]),
                seen_ms=int(i["seen"]["N"]),
                fenced_by=i.get("fenced", {}).get("S", ""),
                stalled=i.get("stl", {}).get("S", ""),
            )
            for i in self._items(f"members#{self.group}#{source}#{target}", False)
        }

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _put(self, item: dict[str, Any]) -> None:
        with self._access("write"):
            self._db.put_item(TableName=self.table, Item=item)

    def _items(self, pk: str, consistent: bool) -> list[dict[str, Any]]:
        with self._access("read"):
            return list(
                self._db.query(
                    TableName=self.table,
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": pk}},
                    ConsistentRead=consistent,
                ).get("Items", [])
            )

    @contextmanager
    def _access(self, what: str) -> Iterator[None]:
        try:
            yield
        except ClientError as e:
            raise StateError(f"cannot {what} the nodes in {self.table}: {e.response['Error']['Message']}") from e
        except BotoCoreError as e:
            raise StateError(f"cannot {what} the nodes in {self.table}: {e}") from e
