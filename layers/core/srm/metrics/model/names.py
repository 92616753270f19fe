"""Every metric name srm publishes, in one place: CloudWatch (EMF) names with their units, and the metrics table's
attribute names (what the metrics API serves). A name used anywhere else (alarms, dashboards, the API) must be one of
these; ``tests/unit/test_metric_names.py`` checks it.

CloudWatch names follow MSK Replicator's where the meaning is the same (``ReplicationLatency``, ``MessageLag``,
``ReplicatorThroughput``, ``ReplicatorFailure``); the others are srm's own. Dimensions are ``Flow`` (``a->b``) and
``Flow`` + ``Topic`` only: never a partition or a group, which would multiply the series without bound.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DIMENSIONS", "EMF_METRICS", "NAMESPACE", "TABLE_ATTRIBUTES", "TABLE_DISTRIBUTIONS"]

NAMESPACE = "ServerlessSRM"
DIMENSIONS = ("Flow", "Topic")

# name → CloudWatch unit (EMF's unit names)
EMF_METRICS: Mapping[str, str] = {
    # mirror, per Flow+Topic and per Flow
    "ReplicatedRecords": "Count",
    "ReplicatorThroughput": "Bytes",  # bytes replicated (MSK Replicator: its rate; CloudWatch's Sum/period gives it)
    "ReplicationLatency": "Milliseconds",  # ack time − record timestamp, the batch's largest
    "RecordAge": "Milliseconds",  # arrival at the function − record timestamp, the batch's largest
    "ReplicatorFailure": "Count",  # failed batches (each is retried)
    "DeadLetteredRecords": "Count",  # records sent to the dead-letter destination (errors.tolerance = all)
    "FilteredRecords": "Count",  # records the flow's transforms dropped (a Filter, or a custom transform)
    "LostOffsets": "Count",  # source offsets purged before they were replicated (data loss), when detected
    "TopicResets": "Count",  # source partitions that started over (topic deleted and recreated), when detected
    # checkpoint function, on its schedule
    "MessageLag": "Count",  # source log end − the event source's committed offset, summed over partitions
    # how old the oldest record not yet replicated is (its partitions' largest; 0: nothing lags), MM2's
    # record-age-ms seen from the source: a stalled topic's grows while the others' stay at their latency
    "OldestUnreplicatedAge": "Milliseconds",
    "StalledTopics": "Count",  # topics lagging without progress for topic.stalled.threshold.seconds (per topic: 1 or 0)
    "CheckpointLatency": "Milliseconds",
    "GroupsCheckpointed": "Count",
    "GroupsSkipped": "Count",
    "HeartbeatAge": "Milliseconds",
    "HeartbeatLatency": "Milliseconds",
    # topic sync
    "TopicsCreated": "Count",
    "TopicConfigsChanged": "Count",
    "TopicAclsChanged": "Count",
    "TopicSyncFailures": "Count",
    "MappingProblems": "Count",  # event source mappings Lambda reports a problem of, at the last topic sync
    # continuous verification (verify.interval.seconds), per Flow+Topic, at each run
    "VerifiedThroughOffset": "Count",  # the next source offset not verified identical yet (the partitions' lowest)
    "VerifiedRecords": "Count",  # records compared by the run
    "VerificationDifferences": "Count",  # missing, extra and different records the run found
}

# The metrics table's attributes (MM2's and SRM's names); distributions are maps {count, min, max, avg, p50, p95, p99}.
TABLE_DISTRIBUTIONS = ("replication-latency-ms", "record-age-ms", "checkpoint-latency-ms")
TABLE_ATTRIBUTES: tuple[str, ...] = (
    "record-count",
    "byte-count",
    "record-rate",
    "byte-rate",
    *TABLE_DISTRIBUTIONS,
    "replication-records-lag",
    "oldest-unreplicated-age-ms",
    "replication-failures",
    "replication-retries",
    "replication-failed-records",
    "replication-failures-by-error",
    "dead-lettered-records",
    "dead-lettered-by-reason",
    "filtered-records",
    "groups-checkpointed",
    "groups-skipped",
    "groups-skipped-by-reason",
    "heartbeat-age-ms",
    "heartbeat-latency-ms",
    "topics-created",
    "partitions-created",
    "topic-configs-changed",
    "topic-acls-changed",
    "topic-sync-failures",
    "topic-sync-failed-steps",
    "mapping-problems",
    "lost-offsets",
    "topic-resets",
    # continuous verification: records compared and differences found by the window's runs (a difference still
    # there is found again by each run). How far each partition is verified is no sum, min or max of its topic's
    # or flow's runs, so the table has none: srm-control status and VerifiedThroughOffset (CloudWatch) show it.
    "verified-records",
    "verification-differences",
)
