"""A stand-in for your application in the guides' runbooks.

    python docs/examples/app.py produce BOOTSTRAP TOPIC COUNT [FIRST]
    python docs/examples/app.py consume BOOTSTRAP GROUP TOPIC [MOST]
    python docs/examples/app.py committed BOOTSTRAP GROUP TOPIC [AT_LEAST]

``produce`` writes COUNT records numbered from FIRST (default 0) to TOPIC, created first with one partition where it
does not exist. ``consume`` reads TOPIC (a regex if it starts with ``^``) as a member of GROUP, prints each record's
value, commits it, and leaves the group after MOST records (default: once nothing arrives for 5 seconds).
``committed`` prints GROUP's committed offset of each partition of TOPIC, and exits 1 when there is none, or when
AT_LEAST is given and their sum is below it.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def produce(bootstrap: str, topic: str, count: int, first: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its answer: its future dies with it
    try:
        admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(first, first + count):
        producer.produce(topic, str(n).encode())
    producer.flush(30)


def consume(bootstrap: str, group: str, topic: str, most: int | None) -> None:
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    read, quiet_since = 0, time.monotonic()
    while (most is None or read < most) and time.monotonic() - quiet_since < 5:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        print(msg.value().decode(), flush=True)
        consumer.commit(msg, asynchronous=False)
        read, quiet_since = read + 1, time.monotonic()
    consumer.close()


def committed(bootstrap: str, group: str, topic: str, at_least: int | None) -> int:
    consumer = _consumer(bootstrap, group)
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    partitions = [TopicPartition(topic, p) for p in sorted(metadata.partitions or ())]
    offsets = [tp for tp in consumer.committed(partitions, timeout=10) if tp.offset >= 0]
    consumer.close()
    for tp in offsets:
        print(tp.topic, tp.partition, tp.offset)
    return 0 if offsets and sum(tp.offset for tp in offsets) >= (at_least or 0) else 1


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["produce", bootstrap, topic, count, *first]:
            produce(bootstrap, topic, int(count), int(first[0]) if first else 0)
        case ["consume", bootstrap, group, topic, *most]:
            consume(bootstrap, group, topic, int(most[0]) if most else None)
        case ["committed", bootstrap, group, topic, *at_least]:
            sys.exit(committed(bootstrap, group, topic, int(at_least[0]) if at_least else None))
        case _:
            sys.exit(__doc__)
