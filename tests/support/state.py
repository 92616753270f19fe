"""The state of a running `srm run`: its state topic where its node keeps the state in Kafka (the default), else its
local store's state table (its URL is in ``.srm-local/store.url`` of its workdir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

from srm.aws.config_table import ConfigStore
from srm.aws.state import DynamoDBState
from srm.kafka.state import KafkaState, state_topic
from srm.local.store import known_store_cluster
from srm.state import StateStore


def state_client(workdir: Path) -> Any:
    """A DynamoDB client of the store of the `srm run` in ``workdir``."""
    url = (workdir / ".srm-local" / "store.url").read_text().strip()
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)


_OPENED: list[KafkaState] = []


def close_states() -> None:
    """Stop the state readers a test opened (tests/conftest.py calls it after each test)."""
    while _OPENED:
        _OPENED.pop().stop()


def state_store(workdir: Path, table: str = "srm-state") -> StateStore:
    config = ConfigStore(state_client(workdir), "srm-config", cache_seconds=0).load()
    alias = known_store_cluster(config.nodes().topic, workdir / ".srm-local")
    if alias is None:
        return DynamoDBState(state_client(workdir), table)
    _OPENED.append(KafkaState.on_cluster(config, alias, state_topic(config.nodes().group_id)).start())
    return _OPENED[-1]
