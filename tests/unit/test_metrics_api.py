"""srm.handlers.metrics_api: every route through the Lambda handler with API Gateway REST proxy events, on moto
tables written through the adapters with known values; the committed OpenAPI spec equals the generated one; remote
querying between in-process deployments over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest
import requests
import schemathesis
from botocore.credentials import Credentials
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from srm.app import App, Environment
from srm.aws.api_client import sigv4_headers
from srm.aws.config_table import create_config_table
from srm.aws.metrics_table import create_metrics_table
from srm.aws.state import TopicMappingRecord, create_state_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.control.metrics import METRICS, BadRequestError, MetricName, MetricQueries
from srm.errors import ConfigError
from srm.handlers.metrics_api import lambda_handler, openapi_json
from srm.local.api_server import ApiServer, api_url, gateway_event
from srm.local.store import free_port
from srm.metrics.model.names import TABLE_ATTRIBUTES
from srm.metrics.model.series import MetricPoint, Series
from tests.support.events import load_event
from tests.support.metrics_api import LATENCY_1, LATENCY_2, NOW, OLD, W1, W2, known_metrics, window

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "metrics-api.json"
CONTEXT = SimpleNamespace(
    function_name="metrics-api",
    memory_limit_in_mb=256,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:metrics-api",
    aws_request_id="req-1",
)


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Config: flows a->b (active), a->c (disabled), b->a (no data), c->a (failing batches); rows for a->b."""
    with known_metrics(monkeypatch) as made:
        yield made


def get(path: str, **query: str) -> tuple[int, dict[str, Any]]:
    event = load_event("api_gateway_metrics.json")
    event["path"] = path
    event["requestContext"]["path"] = "/prod" + path
    event["queryStringParameters"] = query or None
    event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} or None
    response = lambda_handler(event, CONTEXT)
    assert response["multiValueHeaders"]["Content-Type"] == ["application/json"]
    return response["statusCode"], json.loads(response["body"])


def test_replications_lists_every_flow_with_status_and_recent_figures(tables: dict[str, Any]) -> None:
    status, body = get("/v2/replications")
    assert status == 200
    flows = {(f["source"], f["target"]): f for f in body["replications"]}
    assert {k: f["status"] for k, f in flows.items()} == {
        ("a", "b"): "ACTIVE",
        ("a", "c"): "DISABLED",
        ("b", "a"): "INACTIVE",
        ("c", "a"): "FAILING",
    }
    ab = flows[("a", "b")]
    assert ab["enabled"] is True and ab["topics"] == 1
    # the last 5 minutes only: the window an hour ago is left out
    assert ab["figures"]["records"] == 150 and ab["figures"]["bytes"] == 1500
    assert ab["figures"]["record_rate"] == pytest.approx(150 / 300)
    assert ab["figures"]["latency_p99_ms"] == 110
    assert ab["figures"]["latency_p50_ms"] == 18  # the median of 100 × 18 and 50 × 25
    assert ab["figures"]["lag"] == 3  # the latest window's
    assert ab["last_checkpoint_ms"] == NOW - 30_000
    assert ab["heartbeat_age_ms"] >= 4_000
    assert flows[("b", "a")]["figures"]["records"] == 0 and flows[("b", "a")]["figures"]["lag"] is None


def test_topics_of_a_flow_give_upstream_and_remote_names_and_figures(tables: dict[str, Any]) -> None:
    status, body = get("/v2/replications/a/b/topics")
    assert status == 200
    [orders] = body["topics"]
    assert (orders["upstream_topic"], orders["remote_topic"], orders["partitions"]) == ("orders", "a.orders", 2)
    assert orders["figures"]["records"] == 150 and orders["figures"]["lag"] == 3
    assert orders["status"] == "ACTIVE"


def test_cluster_metric_defaults_to_the_last_two_hours_sorted_by_window(tables: dict[str, Any]) -> None:
    status, body = get("/v2/cluster-metrics/a/b/record-count")
    assert status == 200
    assert (body["metric"], body["unit"], body["resolution"]) == ("record-count", "records", "1m")
    assert body["to_ms"] - body["from_ms"] == 2 * 3_600_000
    assert [(p["timestamp"], p["value"]) for p in body["points"]] == [(OLD, 1000), (W1, 100), (W2, 50)]


def test_cluster_metric_over_a_range_and_hourly(tables: dict[str, Any]) -> None:
    _, body = get("/v2/cluster-metrics/a/b/replication-records-lag", **{"from": str(W1), "to": str(NOW)})
    assert [(p["timestamp"], p["value"]) for p in body["points"]] == [(W1, 7), (W2, 3)]
    _, body = get("/v2/cluster-metrics/a/b/heartbeat-age-ms", **{"from": str(W1 + 1)})  # W1's window holds from
    assert [(p["timestamp"], p["value"]) for p in body["points"]] == [(W1, 900)]
    _, hourly = get("/v2/cluster-metrics/a/b/record-count", resolution="1h")
    assert hourly["resolution"] == "1h"
    assert [(p["timestamp"], p["value"]) for p in hourly["points"]] == [(NOW - 3_600_000, 1150)]


def test_topic_distribution_points_carry_their_summary(tables: dict[str, Any]) -> None:
    status, body = get("/v2/topic-metrics/a/b/orders/replication-latency-ms")
    assert status == 200
    assert body["unit"] == "ms" and body["upstream_topic"] == "orders"
    first, second = body["points"]
    assert first == {"timestamp": W1, "value": 20.5, **LATENCY_1}
    assert second == {"timestamp": W2, "value": 30.0, **LATENCY_2}


def test_partition_drill_down(tables: dict[str, Any]) -> None:
    status, body = get("/v2/partition-metrics/a/b/orders/1/record-count")
    assert status == 200 and body["partition"] == 1
    assert [(p["timestamp"], p["value"]) for p in body["points"]] == [(W1, 60)]
    _, empty = get("/v2/partition-metrics/a/b/orders/0/record-count")
    assert empty["points"] == []


@pytest.mark.parametrize(
    ("path", "query", "status", "words"),
    [
        ("/v2/replications/a/x/topics", {}, 404, ["unknown cluster 'x'"]),
        ("/v2/replications/b/c/topics", {}, 404, ["unknown flow b->c"]),
        ("/v2/cluster-metrics/b/c/record-count", {}, 404, ["unknown flow b->c"]),
        ("/v2/topic-metrics/a/b/payments/record-count", {}, 404, ["unknown topic 'payments'"]),
        ("/v2/partition-metrics/a/b/orders/2/record-count", {}, 404, ["unknown partition 2", "2 partitions"]),
        ("/v2/cluster-metrics/a/b/bogus", {}, 400, ["metric", *METRICS]),
        ("/v2/cluster-metrics/a/b/record-count", {"from": str(NOW), "to": str(W1)}, 400, ["is after to"]),
        ("/v2/cluster-metrics/a/b/record-count", {"from": str(NOW - 16 * 86_400_000)}, 400, ["retention"]),
        ("/v2/cluster-metrics/a/b/record-count", {"resolution": "5m"}, 400, ["resolution", "1m", "1h"]),
        ("/v2/cluster-metrics/a/b/record-count", {"from": "yesterday"}, 400, ["from"]),
        ("/v2/partition-metrics/a/b/orders/first/record-count", {}, 400, ["partition"]),
    ],
)
def test_errors_are_json_naming_what_was_wrong(
    tables: dict[str, Any], path: str, query: dict[str, str], status: int, words: list[str]
) -> None:
    got, body = get(path, **query)
    assert got == status
    for word in words:
        assert word in body["message"]


def test_unknown_route_is_404_and_another_method_405(tables: dict[str, Any]) -> None:
    status, body = get("/v2/nothing")
    assert status == 404 and "/v2/replications" in body["message"]
    event = load_event("api_gateway_metrics.json")
    event["httpMethod"] = "DELETE"
    response = lambda_handler(event, CONTEXT)
    assert response["statusCode"] == 405 and response["multiValueHeaders"]["Allow"] == ["GET"]


def test_metric_names_are_the_metrics_table_attributes() -> None:
    assert get_args(MetricName) == tuple(METRICS)
    assert set(METRICS) <= set(TABLE_ATTRIBUTES)


def test_unknown_metric_names_the_valid_ones_without_http(tables: dict[str, Any]) -> None:
    app = App.current()
    queries = MetricQueries(app.config_store, app.state, app.metrics_table)
    with pytest.raises(BadRequestError, match="unknown metric 'bogus'; valid metrics: record-count, byte-count"):
        queries.series("bogus", "a", "b")


def test_committed_openapi_spec_is_the_generated_one() -> None:
    # regenerate with: python -m srm.handlers.metrics_api > openapi/metrics-api.json
    assert json.loads(SPEC.read_text()) == json.loads(openapi_json())


def test_swagger_ui_is_served_with_its_assets_inlined(tables: dict[str, Any]) -> None:
    event = load_event("api_gateway_metrics.json")
    event.update(path="/swagger", queryStringParameters=None, multiValueQueryStringParameters=None)
    response = lambda_handler(event, CONTEXT)
    assert response["statusCode"] == 200
    page = response["body"]
    assert "SwaggerUIBundle" in page and "<script src=" not in page  # the bundle is in the page, no CDN
    event.update(queryStringParameters={"format": "json"}, multiValueQueryStringParameters={"format": ["json"]})
    served = lambda_handler(event, CONTEXT)
    assert json.loads(served["body"])["paths"].keys() == json.loads(SPEC.read_text())["paths"].keys()


def test_the_sample_event_as_api_gateway_delivers_it(tables: dict[str, Any]) -> None:
    response = lambda_handler(load_event("api_gateway_metrics.json"), CONTEXT)
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert (body["metric"], body["upstream_topic"]) == ("record-count", "orders")
    assert [(p["timestamp"], p["value"]) for p in body["points"]] == [(W1, 100), (W2, 50)]


@pytest.fixture
def server(tables: dict[str, Any], tmp_path: Path) -> Iterator[ApiServer]:
    """The handler behind ``srm run``'s HTTP server, on the moto tables."""
    api = ApiServer(lambda_handler, 0, tmp_path)
    api.start()
    yield api
    api.stop()


def test_the_local_server_answers_as_api_gateway_and_writes_its_url(server: ApiServer, tmp_path: Path) -> None:
    assert api_url(tmp_path) == server.url and server.url.startswith("http://127.0.0.1:")
    got = requests.get(f"{server.url}/v2/topic-metrics/a/b/orders/record-count", params={"from": W1}, timeout=10)
    assert got.status_code == 200 and got.headers["Content-Type"] == "application/json"
    assert [(p["timestamp"], p["value"]) for p in got.json()["points"]] == [(W1, 100), (W2, 50)]
    refused = requests.delete(f"{server.url}/v2/replications", timeout=10)
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET" and "use GET" in refused.json()["message"]
    missing = requests.get(f"{server.url}/v2/replications/a/x/topics", timeout=10)
    assert missing.status_code == 404 and "unknown cluster 'x'" in missing.json()["message"]
    server.stop()
    assert api_url(tmp_path) is None  # a stopped server leaves no URL behind
    server.start = lambda: server.url  # type: ignore[method-assign]  # the fixture's stop() must find it stopped


def test_gateway_event_decodes_path_and_query_as_api_gateway_does() -> None:
    event = gateway_event("GET", "/v2/topic-metrics/a/b/my%20topic/record-count?from=1&to=2&to=3", {"X": "y"}, b"")
    assert event["path"] == "/v2/topic-metrics/a/b/my topic/record-count"
    assert event["queryStringParameters"] == {"from": "1", "to": "3"}
    assert event["multiValueQueryStringParameters"] == {"from": ["1"], "to": ["2", "3"]}
    assert event["headers"] == {"X": "y"} and event["body"] is None and event["requestContext"]["stage"] == "local"


def srm_metrics(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "srm.cli.srm", "metrics", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_srm_metrics_once_prints_flows_then_topics(server: ApiServer, tmp_path: Path) -> None:
    done = srm_metrics("--once", cwd=tmp_path)  # finds the server through .srm-local/api.url … here tmp_path's
    assert done.returncode != 0 and "srm run" in done.stderr and len(done.stderr.splitlines()) == 1
    (tmp_path / ".srm-local").mkdir()
    (tmp_path / ".srm-local" / "api.url").write_text(server.url)
    done = srm_metrics("--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows: dict[str, list[str]] = {}
    for line in done.stdout.splitlines()[1:]:  # under the line naming the API and the time
        if line.strip():
            rows.setdefault(line.split()[0], line.split())
    # a->b: ACTIVE, 1 topic, 150 records in 5 minutes = 0.5/s, p50 18, p99 110, lag 3
    assert rows["a->b"][1:7] == ["ACTIVE", "1", "0.5", "18", "110", "3"]
    assert rows["a->c"][1] == "DISABLED" and rows["b->a"][1] == "INACTIVE" and rows["c->a"][1] == "FAILING"
    assert rows["orders"][1:9] == ["->", "a.orders", "ACTIVE", "2", "0.5", "18", "110", "3"]
    as_json = json.loads(srm_metrics("--once", "--json", "--url", server.url, cwd=tmp_path).stdout)
    [ab] = [f for f in as_json["replications"] if f["target"] == "b"]
    assert ab["topics_detail"][0]["remote_topic"] == "a.orders" and ab["figures"]["records"] == 150


def test_srm_metrics_refreshes_until_ctrl_c(server: ApiServer, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "srm.cli.srm", "metrics", "--json", "--interval", "0.2", "--url", server.url]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as watching:
        assert watching.stdout is not None
        documents = [json.loads(watching.stdout.readline()) for _ in range(3)]
        watching.send_signal(signal.SIGINT)
        assert watching.wait(10) == 0
    assert [d["at_ms"] for d in documents] == sorted(d["at_ms"] for d in documents)
    assert all(len(d["replications"]) == 4 for d in documents)


def test_srm_metrics_names_an_api_that_does_not_answer(tmp_path: Path) -> None:
    done = srm_metrics("--once", "--url", f"http://127.0.0.1:{free_port()}", cwd=tmp_path)
    assert done.returncode == 1 and "does not answer" in done.stderr and "Traceback" not in done.stderr


contract = schemathesis.openapi.from_path(SPEC)


@contract.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_route_honours_the_committed_spec_over_http(server: ApiServer, case: Any) -> None:
    response = case.call(base_url=server.url, timeout=10)
    # a schema-valid request may still be refused (from after to, beyond retention): the spec cannot say so
    case.validate_response(response, excluded_checks=[positive_data_acceptance])


def test_the_local_server_gives_the_handler_one_event_at_a_time() -> None:
    # as a Lambda execution environment does: Powertools' resolver keeps the current event in class state, so two
    # events at once would answer each other's routes (the web view asks for several series at once)
    inside, most = 0, 0
    guard = threading.Lock()

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)
        with guard:
            inside -= 1
        return {"statusCode": 200, "body": event["path"]}

    api = ApiServer(handler)
    api.start()
    try:
        paths = [f"/v2/{i}" for i in range(24)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda p: requests.get(api.url + p, timeout=10).text, paths))
    finally:
        api.stop()
    assert answers == paths and most == 1


# ---------------------------------------------------------------------------------------------------------------
# Remote querying: the gateway and its peers, each an in-process server on its own moto tables, over real HTTP
# ---------------------------------------------------------------------------------------------------------------
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
    east.app.metrics_table.write(
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
