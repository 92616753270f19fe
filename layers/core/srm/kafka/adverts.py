"""Metrics API adverts: each deployment writes where its API is (name, base URL, region) to a compacted topic on the
clusters its flows target, keyed by its name, so the newest advert of each deployment is what a reader finds; a
gateway reads them back from every cluster it knows (remote querying, as SRM's Service advertises itself through
its target cluster's heartbeats topic).

The topic ends in ``.internal``: MM2's replication policies take such topics for internal ones and its default
``topics.exclude`` (``.*[\\-\\.]internal``) leaves them out, so no flow — ours or MirrorMaker's — replicates an advert
to another cluster, where it would claim a deployment that does not target it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import SrmConfig
from srm.errors import RetriableError
from srm.kafka.clients import build, consumer_config, produce_and_wait
from srm.mm2.client import read_to_end

__all__ = ["ADVERTS_TOPIC", "AdvertError", "ApiAdvert", "read_adverts", "write_advert"]

ADVERTS_TOPIC = "srm-metrics-api.internal"


class AdvertError(RetriableError, RuntimeError):
    """An advert could not be written, or a cluster's adverts could not be read in time."""


@dataclass(frozen=True)
class ApiAdvert:
    name: str  # the deployment's name: the record key
    url: str  # its API's base URL
    region: str
    advertised_ms: int

    def key(self) -> bytes:
        return self.name.encode()

    def value(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> ApiAdvert | None:
        """The advert in a record's value; None for anything else (a foreign record is skipped, not fatal)."""
        try:
            doc = json.loads(value)
            advert = cls(str(doc["name"]), str(doc["url"]), str(doc.get("region") or ""), int(doc["advertised_ms"]))
        except (ValueError, TypeError, KeyError):
            return None
        return advert if advert.name and advert.url.startswith(("http://", "https://")) else None


def write_advert(producer: Producer, advert: ApiAdvert, timeout_s: float) -> None:
    acks = produce_and_wait(producer, ADVERTS_TOPIC, [(advert.key(), advert.value(), advert.advertised_ms)], timeout_s)
    if acks.error is not None or not acks.settled:
        reason = acks.error.str() if acks.error is not None else f"not acknowledged within {timeout_s:.0f}s"
        raise AdvertError(f"metrics API advert to {ADVERTS_TOPIC}: {reason}")


def read_adverts(
    config: SrmConfig, alias: str, timeout_s: float, resolver: SecretResolver = default_secret_resolver
) -> list[ApiAdvert]:
    """The newest advert of every deployment on ``alias`` (none when the topic does not exist there); deleted
    (tombstoned) deployments are left out. Read by assignment: no group is joined, nothing committed."""
    conf = consumer_config(config, alias, None, group_id="srm-metrics-api-discovery", resolver=resolver)
    conf["log_level"] = "0"  # a cluster that does not answer is reported by the caller, once
    consumer = build(Consumer, conf, config, alias, "consumer")
    deadline = time.monotonic() + timeout_s
    try:
        metadata = consumer.list_topics(ADVERTS_TOPIC, timeout=timeout_s)
        topic = metadata.topics.get(ADVERTS_TOPIC)
        if topic is None or (topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return []
        if topic.error is not None:
            raise AdvertError(f"cluster {alias}: {ADVERTS_TOPIC}: {topic.error.str()}")
        latest: dict[bytes, ApiAdvert | None] = {}
        for partition in topic.partitions:
            left = max(0.1, deadline - time.monotonic())
            low, high = consumer.get_watermark_offsets(TopicPartition(ADVERTS_TOPIC, partition), timeout=left)
            left = max(0.1, deadline - time.monotonic())
            for msg in read_to_end(consumer, {(ADVERTS_TOPIC, partition): (low, high)}, left, batch=500, poll_s=0.1):
                key, value = msg.key(), msg.value()
                if key is not None:
                    latest[key] = None if value is None else ApiAdvert.decode(value)
        return [advert for advert in latest.values() if advert is not None]
    except KafkaException as e:
        raise AdvertError(f"cluster {alias}: cannot read {ADVERTS_TOPIC}: {e.args[0].str()}") from None
    except TimeoutError:
        raise AdvertError(f"cluster {alias}: {ADVERTS_TOPIC} not read within {timeout_s:.0f}s") from None
    finally:
        consumer.close()
