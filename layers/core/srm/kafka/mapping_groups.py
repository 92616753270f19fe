"""The event source mappings' consumer groups on the source: where each partition's replication stands, who consumes
it, and moving it (``srm-control replication-offsets``, the metrics API's Connect-shaped offsets routes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.core.replication_offsets import PartitionPosition
from srm.errors import PermanentError
from srm.kafka.admin import KafkaUnavailableError, alter_group_offsets

__all__ = ["GroupInUseError", "active_members", "commit_positions", "offsets_at", "read_positions"]

# What a broker answers an admin's commit to a group that has members: only a member may commit to it then.
_IN_USE = {
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
}


class GroupInUseError(PermanentError, RuntimeError):
    """The broker refused to move a group's offsets: the group has active members (its mapping runs)."""

    def __init__(self, group: str, reason: str) -> None:
        super().__init__(f"group {group} has active members, the broker refuses to move its offsets ({reason})")
        self.group = group


def _unavailable(what: str, e: KafkaException) -> KafkaUnavailableError:
    error = e.args[0] if e.args else e
    return KafkaUnavailableError(f"cannot {what}: {error.str() if isinstance(error, KafkaError) else error}")


def read_positions(
    admin: AdminClient, groups: Mapping[str, str], partitions: Mapping[str, int], timeout: float
) -> list[PartitionPosition]:
    """Each partition of ``partitions`` (topic → partition count) with its group's (``groups``: topic → group)
    committed offset and its log start and end."""
    wanted = [(t, p) for t, n in partitions.items() for p in range(n)]
    starts = _list_offsets(admin, {tp: OffsetSpec.earliest() for tp in wanted}, timeout)
    ends = _list_offsets(admin, {tp: OffsetSpec.latest() for tp in wanted}, timeout)
    committed: dict[tuple[str, int], int] = {}
    for topic, n in partitions.items():
        group = groups[topic]
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(n)])
        try:
            answer = admin.list_consumer_group_offsets([request], request_timeout=timeout)[group].result()
        except KafkaException as e:
            raise _unavailable(f"read the committed offsets of {group}", e) from None
        for tp in answer.topic_partitions or []:
            if tp.error is None and tp.offset is not None and tp.offset >= 0:
                committed[(tp.topic, tp.partition)] = tp.offset
    return [
        PartitionPosition(t, p, committed.get((t, p)), starts.get((t, p), 0), ends.get((t, p), 0)) for t, p in wanted
    ]


def offsets_at(
    admin: AdminClient, partitions: Iterable[tuple[str, int]], timestamp_ms: int, timeout: float
) -> dict[tuple[str, int], int | None]:
    """Per partition, the offset of its first record with a timestamp at or after ``timestamp_ms``; None when there
    is none (the broker answers -1)."""
    found = _list_offsets(admin, {tp: OffsetSpec.for_timestamp(timestamp_ms) for tp in partitions}, timeout)
    return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}


def _list_offsets(
    admin: AdminClient, wanted: Mapping[tuple[str, int], OffsetSpec], timeout: float
) -> dict[tuple[str, int], int]:
    if not wanted:
        return {}
    request = {TopicPartition(t, p): spec for (t, p), spec in wanted.items()}
    result = {}
    for tp, future in admin.list_offsets(request, request_timeout=timeout).items():
        try:
            result[(tp.topic, tp.partition)] = int(future.result().offset)
        except KafkaException as e:
            raise _unavailable(f"list the offsets of {tp.topic}-{tp.partition}", e) from None
    return result


def active_members(admin: AdminClient, groups: Iterable[str], timeout: float) -> dict[str, int]:
    """How many members each group has now (0: empty or unknown to the broker)."""
    wanted = sorted(set(groups))
    if not wanted:
        return {}
    result = {}
    for group, future in admin.describe_consumer_groups(wanted, request_timeout=timeout).items():
        try:
            result[group] = len(future.result().members or [])
        except KafkaException as e:
            if e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                result[group] = 0
                continue
            raise _unavailable(f"describe group {group}", e) from None
    return result


def commit_positions(admin: AdminClient, group: str, offsets: Mapping[tuple[str, int], int], timeout: float) -> None:
    """Commit ``offsets`` (per partition: the next record to read) to ``group``; the broker takes them only while the
    group has no member (:class:`GroupInUseError` otherwise)."""
    if not offsets:
        return
    try:
        failed = next(iter(alter_group_offsets(admin, group, offsets, timeout).values()), None)
        if failed is not None:
            raise KafkaException(failed)
    except KafkaException as e:
        error = e.args[0] if e.args else None
        if isinstance(error, KafkaError) and error.code() in _IN_USE:
            raise GroupInUseError(group, error.str()) from None
        raise _unavailable(f"commit offsets to {group}", e) from None
