"""Fixtures of the integration tier."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from srm.app import App
from srm.aws.config_table import create_config_table
from srm.aws.state import create_state_table
from srm.local.event_source import EmulatedMapping, MappingSettings
from tests.support.clusters import Cluster
from tests.support.handler import CONFIG_TABLE, HANDLER_ENV, STATE_TABLE, HandlerFlow
from tests.support.kafka import create_topic, unique
from tests.support.mappings import Recorder, running_mapping


@pytest.fixture
def static_mapping(clusters: dict[str, Cluster]) -> Iterator[tuple[EmulatedMapping, Recorder, str, str, str]]:
    """A started mapping of a 2-partition topic of its own, a static member of a group of its own (as srm run's
    consumers are): (the mapping, what it delivers, bootstrap, topic, group)."""
    bootstrap, topic, group = clusters["a"].bootstrap, unique("mapping"), unique("mapping-group")
    create_topic(bootstrap, topic, 2)
    settings = MappingSettings(batch_size=200, batching_window_ms=50)
    with running_mapping(bootstrap, topic, group, settings, static=True) as (m, recorder):
        yield m, recorder, bootstrap, topic, group


@pytest.fixture
def handler_flow(clusters: dict[str, Cluster], monkeypatch: pytest.MonkeyPatch) -> Iterator[HandlerFlow]:
    """Flow a->b on the shared clusters for the mirror handler in-process: its tables on moto, the handler's env set.
    Not configured yet: the test (or its module's fixture) calls ``configure``."""
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(db, CONFIG_TABLE)
        create_state_table(db, STATE_TABLE)
        for name, value in HANDLER_ENV.items():
            monkeypatch.setenv(name, value)
        try:
            yield HandlerFlow(clusters["a"].bootstrap, clusters["b"].bootstrap, db)
        finally:
            App.reset()
