"""srm.kafka.adverts against a real broker: the compacted adverts topic gives each deployment's newest advert,
forgets a tombstoned one and skips records that are not adverts; a cluster that does not answer is an AdvertError
within the timeout. Other tests' runs advertise on the shared clusters too: only this test's names are compared."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.kafka.admin import ensure_topic
from srm.kafka.adverts import ADVERTS_TOPIC, AdvertError, ApiAdvert, read_adverts, write_advert
from srm.local.store import free_port
from tests.support.clusters import Cluster
from tests.support.kafka import admin, unique

pytestmark = pytest.mark.integration


def config(bootstrap: str) -> SrmConfig:
    return SrmConfig.from_properties(
        Properties.of({"clusters": "c, d", "c.bootstrap.servers": bootstrap, "d.bootstrap.servers": bootstrap})
    )


def test_the_newest_advert_of_each_deployment_is_read_back(clusters: dict[str, Cluster]) -> None:
    # GIVEN the adverts topic on c, two adverts of one deployment, one of another then its tombstone, and junk
    bootstrap = clusters["c"].bootstrap
    ensure_topic(admin(bootstrap), ADVERTS_TOPIC, 1, 1, {"cleanup.policy": "compact"})
    p = unique("adv")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    old = ApiAdvert(f"{p}-east", "http://127.0.0.1:1", "eu-west-1", 1_000)
    new = ApiAdvert(f"{p}-east", "https://abc.execute-api.eu-west-1.amazonaws.com/prod", "eu-west-1", 2_000)
    gone = ApiAdvert(f"{p}-gone", "http://127.0.0.1:2", "us-east-1", 1_500)
    for advert in (old, gone, new):
        write_advert(producer, advert, 10)
    producer.produce(ADVERTS_TOPIC, None, gone.key())
    producer.produce(ADVERTS_TOPIC, b"not json", f"{p}-junk".encode())
    assert producer.flush(10) == 0

    # WHEN they are read back
    adverts = [a for a in read_adverts(config(bootstrap), "c", 10) if a.name.startswith(p)]

    # THEN east's newest is the one there, gone is gone and the junk was skipped
    assert adverts == [new]


def test_a_cluster_that_does_not_answer_is_an_advert_error_within_the_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(AdvertError, match=f"cluster c: .*{ADVERTS_TOPIC}"):
        read_adverts(config(f"127.0.0.1:{free_port()}"), "c", 2)
    assert time.monotonic() - started < 10
