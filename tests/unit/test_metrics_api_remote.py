"""The metrics API's remote querying: the gateway and its peers, each an in-process server on its own moto tables,
over real HTTP; the settings that configure it; the signed requests to API Gateway."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from botocore.credentials import Credentials

from srm.app import App, Environment
from srm.aws.api_client import sigv4_headers
from srm.aws.config_table import create_config_table
from srm.aws.metrics_table import create_metrics_table
from srm.aws.state import create_state_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.handlers.metrics_api import lambda_handler
from srm.local.api_server import ApiServer
from srm.metrics.model.series import MetricPoint, Series
from srm.state import TopicMappingRecord
from tests.support.metrics_api import LATENCY_1, NOW, W1, window
from tests.unit.metrics_api_access import srm_metrics


@dataclass
class Deployed:
    server: ApiServer
    app: App

    @property
    def url(self) -> str:
        return self.server.url


def deploy(db: Any, prefix: str, name: str, props: dict[str, str] | None = None) -> Deployed:
    """A deployment's API on its own tables (``<prefix>config`` …): the handler runs with its own App."""
    holder: dict[str, App] = {}

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with App.serving(holder["app"]):
            return lambda_handler(event, context)

    server = ApiServer(handler)
    tables = {"config_table": f"{prefix}config", "state_table": f"{prefix}state", "metrics_table": f"{prefix}metrics"}
    if props is not None:
        create_config_table(db, tables["config_table"])
        create_state_table(db, tables["state_table"])
        create_metrics_table(db, tables["metrics_table"])
    env = Environment(None, None, config_cache_seconds=0, api_url=server.url, deployment=name, **tables)
    holder["app"] = app = App(env, dynamodb=db)
    if props is not None:
        app.config_store.replace_all(SrmConfig.from_properties(Properties.of(props)))
    server.start()
    return Deployed(server, app)


def configure(app: App, **more: str) -> None:
    props = {**dict(app.config().properties.items()), **{k.replace("_", "."): v for k, v in more.items()}}
    app.config_store.replace_all(SrmConfig.from_properties(Properties.of(props)))


@pytest.fixture
def remote(tables: dict[str, Any]) -> Iterator[SimpleNamespace]:
    """``central`` (the ``tables`` deployment: a->b, a->c, b->a, c->a) is the gateway; ``east`` runs x->y and knows
    central as a peer too (two gateways that know each other); ``gone``'s API has stopped."""
    db = tables["db"]
    east = deploy(
        db,
        "east-",
        "east",
        {"clusters": "x, y", "x.bootstrap.servers": "x:9092", "y.bootstrap.servers": "y:9092", "x->y.enabled": "true"},
    )
    east.app.state.put_topic_mapping("x", "y", TopicMappingRecord("clicks", "x.clicks", 3))
    east.app.metrics_store.write(
        [
            MetricPoint(Series("1m", "flow", "x", "y"), W1, window(40, 0, LATENCY_1)),
            MetricPoint(Series("1m", "topic", "x", "y", "clicks"), W1, window(40, 0, LATENCY_1)),
        ]
    )
    gone = deploy(db, "", "gone")
    gone_url = gone.url
    gone.server.stop()
    central = deploy(db, "", "central")
    configure(central.app, metrics_api_peers=f"{east.url}, {gone_url}, {central.url}")  # itself too: skipped
    configure(east.app, metrics_api_peers=central.url)
    yield SimpleNamespace(central=central, east=east, gone_url=gone_url)
    for deployed in (central, east):
        deployed.server.stop()


def test_gateway_lists_every_deployments_flows_each_with_who_serves_it(remote: SimpleNamespace) -> None:
    got = requests.get(f"{remote.central.url}/v2/replications", timeout=30)
    assert got.status_code == 200
    body = got.json()
    served = {(f["source"], f["target"]): f["served_by"]["name"] for f in body["replications"]}
    # each flow once: east, a gateway that knows central, answered the forwarded request from its own tables only
    assert served == {("a", "b"): "central", ("a", "c"): "central", ("b", "a"): "central", ("c", "a"): "central"} | {
        ("x", "y"): "east"
    }
    assert len(body["replications"]) == 5
    xy = next(f for f in body["replications"] if f["source"] == "x")
    assert xy["served_by"] == {"name": "east", "url": remote.east.url, "region": "us-east-1"}
    assert xy["figures"]["records"] == 40 and xy["topics"] == 1 and xy["status"] == "ACTIVE"
    assert body["served_by"] == {"name": "central", "url": remote.central.url, "region": "us-east-1"}
    peers = {p["url"]: p for p in body["peers"]}
    assert set(peers) == {remote.east.url, remote.gone_url}  # not itself
    assert peers[remote.east.url] | {"error": None} == {
        "name": "east",
        "url": remote.east.url,
        "region": "us-east-1",
        "found_via": "config",
        "status": "ok",
        "http_status": 200,
        "error": None,
        "flows": 1,
    }
    down = peers[remote.gone_url]
    assert down["status"] == "unreachable" and down["http_status"] is None and "refused" in down["error"]


def test_gateway_answers_for_another_deployments_flow_with_its_answer(remote: SimpleNamespace) -> None:
    direct = requests.get(f"{remote.east.url}/v2/replications/x/y/topics", timeout=30)
    through = requests.get(f"{remote.central.url}/v2/replications/x/y/topics", timeout=30)
    assert through.status_code == direct.status_code == 200
    assert through.json() == direct.json() and through.json()["topics"][0]["remote_topic"] == "x.clicks"
    assert through.headers["X-Srm-Served-By"] == "east"
    query = {"from": str(W1), "to": str(NOW), "resolution": "1m"}
    series = requests.get(f"{remote.central.url}/v2/topic-metrics/x/y/clicks/record-count", params=query, timeout=30)
    assert series.status_code == 200
    assert [(p["timestamp"], p["value"]) for p in series.json()["points"]] == [(W1, 40)]
    # the owner's errors come back as it gave them
    missing = requests.get(f"{remote.central.url}/v2/topic-metrics/x/y/nope/record-count", timeout=30)
    assert missing.status_code == 404 and "unknown topic 'nope'" in missing.json()["message"]
    # and central's own flows are still answered by central
    own = requests.get(f"{remote.central.url}/v2/replications/a/b/topics", timeout=30)
    assert own.status_code == 200 and "X-Srm-Served-By" not in own.headers


def test_a_forwarded_request_is_answered_locally_only(remote: SimpleNamespace) -> None:
    forwarded = {"X-Srm-Forwarded-By": "someone"}
    got = requests.get(f"{remote.central.url}/v2/replications", headers=forwarded, timeout=30).json()
    assert {f["served_by"]["name"] for f in got["replications"]} == {"central"} and got["peers"] == []
    refused = requests.get(f"{remote.central.url}/v2/replications/x/y/topics", headers=forwarded, timeout=30)
    assert refused.status_code == 404 and "unknown cluster 'x'" in refused.json()["message"]


def test_a_flow_nobody_runs_is_404_and_502_while_a_peer_does_not_answer(remote: SimpleNamespace) -> None:
    down = requests.get(f"{remote.central.url}/v2/replications/z/y/topics", timeout=30)
    assert down.status_code == 502
    assert "z->y is not run here" in down.json()["message"] and "gone" not in down.json()["message"]
    assert remote.gone_url in down.json()["message"]  # named by URL: it never said its name
    configure(remote.central.app, metrics_api_peers=remote.east.url)
    unknown = requests.get(f"{remote.central.url}/v2/replications/z/y/topics", timeout=30)
    assert unknown.status_code == 404 and "unknown cluster 'z'" in unknown.json()["message"]


def test_a_peer_that_is_itself_under_another_address_is_not_listed(remote: SimpleNamespace) -> None:
    # localhost and 127.0.0.1 are one server: it says it is central, so it is not a peer
    alias = remote.central.url.replace("127.0.0.1", "localhost")
    configure(remote.central.app, metrics_api_peers=alias)
    got = requests.get(f"{remote.central.url}/v2/replications", timeout=30).json()
    assert got["peers"] == [] and len(got["replications"]) == 4


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("metrics.api.peers", "https://ok.example/prod, ftp://x", ["metrics.api.peers", "'ftp://x'", "http(s)://"]),
        ("metrics.api.peers", "http://h:1/?a=b", ["not an API base URL"]),
        ("metrics.api.gateway.enabled", "yes", ["metrics.api.gateway.enabled", "true or false"]),
        ("metrics.api.deployment.name", "my name", ["metrics.api.deployment.name", "'my name'"]),
    ],
)
def test_remote_querying_settings_are_checked_with_one_line_errors(key: str, value: str, words: list[str]) -> None:
    props = {"clusters": "a, b", "a.bootstrap.servers": "a:9092", "b.bootstrap.servers": "b:9092", key: value}
    with pytest.raises(ConfigError) as raised:
        SrmConfig.from_properties(Properties.of(props))
    assert "\n" not in str(raised.value)
    for word in words:
        assert word in str(raised.value)


def test_remote_querying_settings_parse() -> None:
    props = {
        "clusters": "a, b",
        "metrics.api.peers": "https://abc.execute-api.eu-west-1.amazonaws.com/prod/, http://127.0.0.1:8080",
        "metrics.api.gateway.enabled": "true",
        "metrics.api.deployment.name": "eu-west-1",
    }
    config = SrmConfig.from_properties(Properties.of(props))
    assert config.metrics_api_peers() == (
        "https://abc.execute-api.eu-west-1.amazonaws.com/prod",
        "http://127.0.0.1:8080",
    )
    assert config.metrics_api_gateway() and config.metrics_api_deployment_name() == "eu-west-1"
    assert not config.warnings


def test_requests_to_api_gateway_are_signed_for_execute_api() -> None:
    credentials = Credentials("AKIDEXAMPLE", "secret", "token")
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/v2/replications"
    headers = sigv4_headers(url, {"X-Srm-Forwarded-By": "central"}, credentials, "eu-west-1")
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "x-srm-forwarded-by" in authorization  # the loop guard is signed too
    assert headers["X-Amz-Security-Token"] == "token" and headers["X-Srm-Forwarded-By"] == "central"


def test_srm_metrics_through_a_gateway_names_who_serves_each_flow(remote: SimpleNamespace, tmp_path: Path) -> None:
    done = srm_metrics("--once", "--url", remote.central.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("FLOW"))
    assert header.split()[-2:] == ["SERVED", "BY"]
    served: dict[str, str] = {}
    for line in done.stdout.splitlines()[1:]:
        if line.split() and "->" in line.split()[0]:
            served.setdefault(line.split()[0], line.split()[-1])
    assert served["x->y"] == "east" and served["a->b"] == "central"
    assert "clicks -> x.clicks" in done.stdout  # the peer's topics, asked through the gateway
