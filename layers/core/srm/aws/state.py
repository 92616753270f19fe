"""The state table (DynamoDB): offset runs and the other bookkeeping replication needs to survive restarts.

This module and the two it is built from (:mod:`srm.aws.state_runs`, :mod:`srm.aws.state_table`) alone know
the item layout. Keys: ``pk`` (S) and ``sk`` (S).

==================================  ==================================  ========================================
item                                pk                                  sk / attributes
==================================  ==================================  ========================================
offset run (see :mod:`srm.core.offsets`)``runs#<src>#<tgt>#<topic>#<p>``   ``sk`` = upstream start (20 digits); d, n
origin of a partition's runs         ``origin#<src>#<tgt>#<topic>``     ``sk`` = partition; o, f, at
last checkpoint of a group           ``ckpt#<src>#<tgt>#<group>``       ``sk`` = ``<topic>#<p>``; u, d, rt, m, at;
                                                                        nu, nw, nat
flow status                          ``flow#<src>#<tgt>``               ``sk`` = ``status``; one attribute per fact
topic mapping (srm-meta.internal)    ``topics#<src>#<tgt>``             ``sk`` = source topic; rt, p, cr, at, cf, acl
event source mapping                 ``esm#<src>#<tgt>``                ``sk`` = source topic; id, on, bs, bw, mp, at
offsets purged before replication    ``lost#<src>#<tgt>``               ``sk`` = ``<topic>#<p>#<start>``; e, at
records skipped past the last run    ``next#<src>#<tgt>#<topic>``       ``sk`` = partition; n
topic reset of a partition           ``reset#<src>#<tgt>``              ``sk`` = ``<topic>#<p>#<at>``; e, r, l
archived item of an old incarnation  ``old#<label>#<its pk>``           as the item it was
==================================  ==================================  ========================================

The origin of a partition's runs (:class:`srm.core.offsets.Origin`) is written once, by the first batch recorded while
the partition has no run: ``o`` its first offset, ``f`` true when that was the log start, ``at`` when (ms). A
checkpoint item's ``nu``/``nw``/``nat`` are present while the group's committed offset ``nu`` there got no
checkpoint: why (``nw``), since when (``nat``); ``srm-control offsets`` reports them. The origin's ``tid`` is the
source topic's id when the origin was written (absent where the broker has no topic ids).

What cannot be replayed (:mod:`srm.replication.continuity`): a lost range is ``start`` … ``e`` − 1, detected at
``at``; ``next`` holds the offset past a batch whose last records the identity loop guard skipped (so they are not
taken for a gap). A topic reset of a partition moves its runs, origin, lost ranges and ``next`` item under
``old#<label>#…`` (label: when, ms) and records ``e`` the old incarnation's replicated end, ``r`` why, ``l`` the label.

A topic mapping says what a flow replicates (what SRM keeps in ``srm-meta.internal``), so discovery and monitoring
work whatever the policy: ``rt`` remote topic, ``p`` partitions, ``cr`` true when srm created the remote topic (the
identity loop guard's notion of "came from"), ``at`` last sync (ms), ``cf`` the configs srm set on the remote topic
(map), ``acl`` the ACL bindings srm created on it (list). An event source mapping item records the mapping of a
source topic: ``id`` (Lambda UUID), ``on`` enabled, ``bs`` batch size, ``bw`` batching window ms, ``mp`` the
payload a batch is cut at, ``at`` (ms).
Facts of the flow status written by the topic control plane: ``topic_configs_synced_ms``,
``topic_acls_synced_ms``, and by the mirror ``heartbeat_ms`` (timestamp of the newest heartbeat replicated),
``heartbeat_latency_ms`` (its replication latency) and ``heartbeat_replicated_ms`` (when it was written); by the
local runtime's watchdog ``stalled`` (JSON: what is stuck → since when, ms, and why; ``{}`` when nothing is).

Offset runs are written once per batch per partition. The last run of each partition is cached in the container;
extending it is a conditional put on its previous length, so a stale cache (the partition was processed elsewhere
meanwhile) is detected, reloaded and retried rather than overwriting newer state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from srm.aws.state_runs import OffsetRunState
from srm.aws.state_table import create_state_table
from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.state.records import DEFAULT_MAX_PAYLOAD_BYTES, EventSourceMappingRecord, GroupCheckpoints, TopicMappingRecord

__all__ = ["DynamoDBState", "create_state_table"]


class DynamoDBState(OffsetRunState):
    """The state port (:class:`srm.state.StateStore`) on a DynamoDB table: offset runs and continuity
    (:class:`~srm.aws.state_runs.OffsetRunState`), checkpoints, flow status, and the topic control plane's records.
    Ownership needs no claim here: a stale writer's conditional put fails (see :meth:`record_runs`)."""

    def claim_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        pass

    def release_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        pass

    def claim_leadership(self, source: str, target: str) -> None:
        pass

    def release_leadership(self, source: str, target: str) -> None:
        pass

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def checkpoints(self, source: str, target: str, group: str) -> GroupCheckpoints:
        """The last checkpoint emitted per upstream topic-partition of a group, and the committed offsets that got
        none (with why)."""
        items = self._items(f"ckpt#{source}#{target}#{group}")
        result = GroupCheckpoints({}, {})
        for item in items:
            topic, _, partition = item["sk"]["S"].rpartition("#")
            key = (topic, int(partition))
            if "u" in item:
                result.emitted[key] = StoredCheckpoint(
                    upstream_offset=int(item["u"]["N"]),
                    downstream_offset=int(item["d"]["N"]),
                    remote_topic=item["rt"]["S"],
                    metadata=item.get("m", {"S": ""})["S"],
                    at_ms=int(item["at"]["N"]),
                )
            if "nw" in item:
                result.untranslated[key] = Untranslated(int(item["nu"]["N"]), item["nw"]["S"], int(item["nat"]["N"]))
        return result

    def set_untranslated(
        self, source: str, target: str, group: str, changes: Mapping[tuple[str, int], Untranslated | None]
    ) -> None:
        """Note (or, for None, clear) why a group's committed offset got no checkpoint, leaving the checkpoint."""
        for (topic, partition), change in changes.items():
            key = {"pk": {"S": f"ckpt#{source}#{target}#{group}"}, "sk": {"S": f"{topic}#{partition}"}}
            if change is None:
                update: dict[str, Any] = {"UpdateExpression": "REMOVE nu, nw, nat"}
            else:
                update = {
                    "UpdateExpression": "SET nu = :u, nw = :w, nat = :at",
                    "ExpressionAttributeValues": {
                        ":u": {"N": str(change.upstream_offset)},
                        ":w": {"S": change.reason},
                        ":at": {"N": str(change.at_ms)},
                    },
                }
            with self._access("write"):
                self._db.update_item(TableName=self.table, Key=key, **update)

    def put_checkpoints(
        self, source: str, target: str, group: str, checkpoints: dict[tuple[str, int], StoredCheckpoint]
    ) -> None:
        pk = f"ckpt#{source}#{target}#{group}"
        self._batch_write(
            [
                {
                    "PutRequest": {
                        "Item": {
                            "pk": {"S": pk},
                            "sk": {"S": f"{topic}#{partition}"},
                            "u": {"N": str(c.upstream_offset)},
                            "d": {"N": str(c.downstream_offset)},
                            "rt": {"S": c.remote_topic},
                            "m": {"S": c.metadata},
                            "at": {"N": str(c.at_ms)},
                        }
                    }
                }
                for (topic, partition), c in checkpoints.items()
            ]
        )

    # -- flow status -----------------------------------------------------------------------------------------
    def flow_status(self, source: str, target: str) -> dict[str, int | str]:
        """Facts about a flow written by its functions (e.g. ``last_checkpoint_ms``); numbers come back as int."""
        item = self._get(f"flow#{source}#{target}", "status")
        facts: dict[str, int | str] = {}
        for name, value in (item or {}).items():
            if name not in ("pk", "sk"):
                facts[name] = int(value["N"]) if "N" in value else value["S"]
        return facts

    def update_flow_status(self, source: str, target: str, **facts: int | str) -> None:
        """Set some facts about a flow, leaving the others as they are."""
        names = {f"#f{i}": name for i, name in enumerate(facts)}
        values = {f":v{i}": ({"N": str(v)} if isinstance(v, int) else {"S": v}) for i, v in enumerate(facts.values())}
        with self._access("write"):
            self._db.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"flow#{source}#{target}"}, "sk": {"S": "status"}},
                UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(facts))),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )

    # -- topic mappings and event source mappings (the topic control plane) ---------------------------------------
    def topic_mappings(self, source: str, target: str) -> dict[str, TopicMappingRecord]:
        """Every topic ``source->target`` replicates (as of its last topic sync), by source topic."""
        return self._by_sort_key(f"topics#{source}#{target}", _topic_mapping)

    def put_topic_mapping(self, source: str, target: str, record: TopicMappingRecord) -> None:
        item = {
            "pk": {"S": f"topics#{source}#{target}"},
            "sk": {"S": record.topic},
            "rt": {"S": record.remote_topic},
            "p": {"N": str(record.partitions)},
            "cr": {"BOOL": record.created},
            "at": {"N": str(record.synced_at_ms)},
            "cf": {"M": {k: {"S": v} for k, v in sorted(record.configs.items())}},
            "acl": {"L": [{"S": a} for a in sorted(record.acls)]},
        }
        self._put(item)

    def delete_topic_mapping(self, source: str, target: str, topic: str) -> None:
        self._delete(f"topics#{source}#{target}", topic)

    def event_source_mappings(self, source: str, target: str) -> dict[str, EventSourceMappingRecord]:
        """The event source mapping of every source topic of ``source->target`` that has one."""
        return self._by_sort_key(f"esm#{source}#{target}", _event_source_mapping)

    def put_event_source_mapping(self, source: str, target: str, record: EventSourceMappingRecord) -> None:
        self._put(
            {
                "pk": {"S": f"esm#{source}#{target}"},
                "sk": {"S": record.topic},
                "id": {"S": record.id},
                "on": {"BOOL": record.enabled},
                "bs": {"N": str(record.batch_size)},
                "bw": {"N": str(record.batching_window_ms)},
                "at": {"N": str(record.updated_at_ms)},
                "mp": {"N": str(record.max_payload_bytes)},
                **({"pr": {"S": record.problem}} if record.problem else {}),
            }
        )

    def delete_event_source_mapping(self, source: str, target: str, topic: str) -> None:
        self._delete(f"esm#{source}#{target}", topic)


def _topic_mapping(item: dict[str, Any]) -> TopicMappingRecord:
    return TopicMappingRecord(
        topic=item["sk"]["S"],
        remote_topic=item["rt"]["S"],
        partitions=int(item["p"]["N"]),
        created=item.get("cr", {}).get("BOOL", False),
        synced_at_ms=int(item.get("at", {}).get("N", "0")),
        configs={k: v["S"] for k, v in item.get("cf", {}).get("M", {}).items()},
        acls=tuple(v["S"] for v in item.get("acl", {}).get("L", [])),
    )


def _event_source_mapping(item: dict[str, Any]) -> EventSourceMappingRecord:
    return EventSourceMappingRecord(
        topic=item["sk"]["S"],
        id=item["id"]["S"],
        enabled=item["on"]["BOOL"],
        batch_size=int(item["bs"]["N"]),
        batching_window_ms=int(item["bw"]["N"]),
        updated_at_ms=int(item.get("at", {}).get("N", "0")),
        problem=item.get("pr", {}).get("S", ""),
        max_payload_bytes=int(item.get("mp", {}).get("N", str(DEFAULT_MAX_PAYLOAD_BYTES))),
    )
