"""The local store of `srm run` (the DynamoDB emulation over a compacted topic) on a real broker: one state directory
serves one `srm run` at a time."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from srm.aws.state import create_state_table
from srm.local.store import KafkaStoreSpec, LocalStore, StoreError
from tests.support.kafka import create_topic, unique

pytestmark = pytest.mark.integration


def test_second_store_on_the_same_state_directory_is_refused_with_what_to_do(clusters, tmp_path: Path):
    # GIVEN a store started in a state directory
    bootstrap, topic = clusters["b"].bootstrap, unique("srm-store")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    conf = {"bootstrap.servers": bootstrap}
    spec = KafkaStoreSpec("b", topic, conf, dict(conf))
    first = LocalStore(spec, state_dir=tmp_path)
    first.start()
    try:
        # WHEN a second one starts there, THEN it is refused, saying what to do
        with pytest.raises(StoreError, match=r"another srm run is using .*: stop it, or start this one in another"):
            LocalStore(spec, state_dir=tmp_path).start()
    finally:
        first.stop()

    # THEN once the first stopped, the directory is free again
    assert not (tmp_path / "store.url").exists()
    second = LocalStore(spec, state_dir=tmp_path)
    try:
        url = second.start()
        assert second.wait_ready(60)
        create_state_table(boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url), "srm-state")
    finally:
        second.stop()
