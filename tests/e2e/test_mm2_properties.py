"""An unchanged-style `mm2.properties` drives `srm run` exactly as the YAML config does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kafka import assert_identical, create_topic_with_records, list_topic_names, unique, wait_replicated
from tests.support.mm2 import ONE_REPLICA
from tests.support.runtime import SrmRun, write_properties

pytestmark = pytest.mark.e2e


def test_mm2_properties_file_replicates_identically(clusters, tmp_path: Path):
    # GIVEN two topics on a and an mm2.properties as MM2 users write it (Connect keys included)
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("props")
    topics = {f"{p}.one": 1, f"{p}.two": 2}
    for topic, partitions in topics.items():
        create_topic_with_records(a, topic, partitions, 120)
    config = write_properties(
        tmp_path / "mm2.properties",
        {
            "clusters": "a, b",
            "a.bootstrap.servers": a,
            "b.bootstrap.servers": b,
            "a->b.enabled": "true",
            "a->b.topics": f"{p}\\\\..*",  # a properties file unescapes once: the regex is <p>\..*
            "b->a.enabled": "false",
            **ONE_REPLICA,
            "tasks.max": "1",
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "refresh.topics.interval.seconds": "1",
            "sync.topic.acls.enabled": "false",
        },
    )

    # WHEN srm run is given that file
    with SrmRun(config, tmp_path) as run:
        for topic in topics:
            wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        assert run.alive(), run.output()[-2000:]

    # THEN the result is what the YAML config gives: every partition identical, and nothing flows b->a
    for topic, partitions in topics.items():
        assert len(assert_identical(a, topic, b, f"a.{topic}")) == partitions
    assert not {t for t in list_topic_names(a) if t.startswith(f"b.a.{p}")}
    assert "not a setting serverless-srm knows" not in run.output(), run.output()[-2000:]
