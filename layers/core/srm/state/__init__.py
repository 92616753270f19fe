"""srm's state in its own terms: the records replication and control keep across restarts, and the port
(:class:`StateStore`) they read and write them through. Two adapters implement it: DynamoDB on AWS
(:class:`srm.aws.state.DynamoDBState`) and a compacted Kafka topic for ``srm run``
(:class:`srm.kafka.state.KafkaState`).
"""

from srm.state.port import StateStore
from srm.state.records import (
    EventSourceMappingRecord,
    GroupCheckpoints,
    LossRecord,
    ResetRecord,
    StateError,
    StateFencedError,
    TopicMappingRecord,
    read_stalls_fact,
    stalls_fact,
)

__all__ = [
    "EventSourceMappingRecord",
    "GroupCheckpoints",
    "LossRecord",
    "ResetRecord",
    "StateError",
    "StateFencedError",
    "StateStore",
    "TopicMappingRecord",
    "read_stalls_fact",
    "stalls_fact",
]
