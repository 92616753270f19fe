"""`srm run`'s supervisor with real worker processes that die: the first restart is immediate, a worker that keeps
dying soon after its start is restarted after 1, 2, 4 … s, and every exit is logged with its status."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.local.runtime import LocalRuntime, RuntimeOptions


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    config = SrmConfig.from_properties(
        Properties.of(
            {
                "clusters": "a, b",
                "a.bootstrap.servers": "a:9092",
                "b.bootstrap.servers": "b:9092",
                "a->b.enabled": "true",
            }
        )
    )
    # A worker that cannot start: it exits with status 2 as soon as it has read its environment.
    runtime = LocalRuntime(config, RuntimeOptions(extra_env={"SRM_STALL_SECONDS": "soon"}))
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(client, "srm-config")
        runtime.config_store = DynamoDBConfig(client, "srm-config", cache_seconds=0)
        runtime.config_store.replace_all(runtime.config, author="test")
        try:
            yield runtime
        finally:
            runtime.stop()


def test_worker_dying_at_start_is_restarted_at_once_then_with_a_growing_delay(
    runtime: LocalRuntime, caplog: pytest.LogCaptureFixture
):
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="srm.local.runtime"):
        runtime.reconcile()
        supervisor = threading.Thread(target=runtime.run_until, args=(stop, 60.0))
        supervisor.start()
        try:
            deadline = time.monotonic() + 30
            while caplog.text.count("worker exited") < 4 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            supervisor.join(10)

    exits = [r for r in caplog.records if "worker exited" in r.getMessage()]
    starts = [r.created for r in caplog.records if r.getMessage() == "a->b: starting worker"]
    assert [re.sub(r"\(.*\)", "(…)", r.getMessage()) for r in exits[:4]] == [
        "a->b worker exited with status 2; restarting it now",
        "a->b worker exited with status 2; restarting it in 1s (…)",
        "a->b worker exited with status 2; restarting it in 2s (…)",
        "a->b worker exited with status 2; restarting it in 4s (…)",
    ]
    # each start follows the exit before it after the delay announced (and promptly: the supervisor looks 5×/s)
    for exit_record, start, delay in zip(exits[:3], starts[1:4], (0, 1, 2), strict=True):
        assert delay <= start - exit_record.created < delay + 1.0
