"""Fixtures shared by the unit tests of one subject across several modules: the SAM templates (``test_template*``),
the metrics API's tables (``test_metrics_api*``), srm-control on the two clusters of fake_clusters.py (the status and
watchdog tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.control.edits import Control
from srm.state import StateStore
from tests.unit.fake_clusters import PROPS
from tests.unit.sam_templates import MONITORING, PARAMETERS, TEMPLATE, load_template


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    """``template.yaml``, the flow's stack."""
    return load_template(TEMPLATE)


@pytest.fixture(scope="session")
def monitoring() -> dict[str, Any]:
    """``template-monitoring.yaml``: one stack per region, shared by the flow stacks."""
    return load_template(MONITORING)


@pytest.fixture(scope="session")
def translated(template: dict[str, Any]) -> dict[str, Any]:
    """``template.yaml`` after the SAM transform, for the example flow's PARAMETERS."""
    pytest.importorskip(
        "samtranslator.translator.transform", reason="the SAM transform needs aws-sam-translator (dev dependency)"
    )
    from tests.support.moto_stacks import sam_translate

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-west-2")  # the translator needs a region, never a credential
        return sam_translate(template, PARAMETERS)


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The metrics API's moto tables. Config: flows a->b (active), a->c (disabled), b->a (no data), c->a (failing
    batches); rows for a->b (tests/support/metrics_api.py)."""
    from tests.support.metrics_api import known_metrics

    with known_metrics(monkeypatch) as made:
        yield made


@pytest.fixture
def control(state: StateStore, monkeypatch: pytest.MonkeyPatch) -> Control:
    """srm-control's use cases on a config table holding fake_clusters.PROPS, in the AWS account of the ``state``
    fixture and beside its state table; ``srm-control`` finds both tables through its environment variables."""
    db = boto3.client("dynamodb", region_name="us-east-1")
    create_config_table(db, "srm-config")
    monkeypatch.setenv("SRM_CONFIG_TABLE", "srm-config")
    monkeypatch.setenv("SRM_STATE_TABLE", state.table)
    control = Control(DynamoDBConfig(db, "srm-config", cache_seconds=0))
    control.import_config(SrmConfig.from_properties(Properties.of(PROPS)))
    return control
