"""Fixtures of the Lambda runtime tier: one ``sam build`` for this machine's CPU (kept while its sources are
unchanged), DynamoDB on moto in server mode (the functions run in processes of their own), flow a->b on the shared
clusters, and one Runtime Interface Emulator per built function."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from srm.aws.config_table import create_config_table
from srm.aws.metrics_table import create_metrics_table
from srm.aws.state import create_state_table
from tests.support.clusters import Cluster
from tests.support.handler import CONFIG_TABLE, HANDLER_ENV, STATE_TABLE, HandlerFlow
from tests.support.kafka import unique
from tests.support.lambda_runtime import FunctionRuntime, built_functions, template_runtime
from tests.support.sam import MACHINE_ARCHITECTURE, TEMPLATE, layer_dir
from tests.unit.sam_templates import deployed_name, functions, load_template

METRICS_TABLE = "srm-metrics"


@pytest.fixture(scope="session")
def built() -> Path:
    """The ``sam build`` output (a folder per function and the layer) for this machine's architecture."""
    return built_functions(template_runtime(), MACHINE_ARCHITECTURE)


@pytest.fixture(scope="session")
def aws_endpoint() -> Iterator[str]:
    """moto on a free loopback port with the flow's config, state and metrics tables."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        db = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1")
        create_config_table(db, CONFIG_TABLE)
        create_state_table(db, STATE_TABLE)
        create_metrics_table(db, METRICS_TABLE)
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def lambda_flow(clusters: dict[str, Cluster], aws_endpoint: str) -> tuple[HandlerFlow, str]:
    """Flow a->b selecting ``<prefix>.*``, configured before any function starts (their config cache is cold)."""
    db = boto3.client("dynamodb", endpoint_url=aws_endpoint, region_name="us-east-1")
    flow = HandlerFlow(clusters["a"].bootstrap, clusters["b"].bootstrap, db)
    prefix = unique("rie")
    flow.configure(prefix, {"verify.interval.seconds": "3600"})  # continuous verification on, for the verify function
    return flow, prefix


@pytest.fixture(scope="session")
def runtimes(
    built: Path, aws_endpoint: str, lambda_flow: tuple[HandlerFlow, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FunctionRuntime]]:
    """Every function of template.yaml, by its ``functions/<name>`` name, in an RIE of its own."""
    logs = tmp_path_factory.mktemp("rie")
    env = {
        **HANDLER_ENV,
        "SRM_METRICS_TABLE": METRICS_TABLE,
        "AWS_ENDPOINT_URL": aws_endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_NAMESPACE": "ServerlessSRM",
        "LOG_LEVEL": "INFO",
    }
    started: dict[str, FunctionRuntime] = {}
    try:
        for logical_id, function in functions(load_template(TEMPLATE)).items():
            name = deployed_name(function)
            layer = layer_dir(built, MACHINE_ARCHITECTURE)
            runtime = FunctionRuntime(built / logical_id, layer, env, logs / f"{name}.log")
            started[name] = runtime.start()
        yield started
    finally:
        for runtime in started.values():
            runtime.stop()
