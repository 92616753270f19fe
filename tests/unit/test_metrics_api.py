"""srm.handlers.metrics_api: every route through the Lambda handler with API Gateway REST proxy events, on moto
tables written through the adapters with known values; the committed OpenAPI spec equals the generated one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from srm.app import App
from srm.control.metrics import METRICS, BadRequestError, MetricName, MetricQueries
from srm.handlers.metrics_api import lambda_handler, openapi_json
from srm.local.api_server import ApiServer, api_url, gateway_event
from srm.local.store import free_port
from srm.metrics.names import TABLE_ATTRIBUTES
from tests.support.events import load_event
from tests.support.metrics_api import LATENCY_1, LATENCY_2, NOW, OLD, W1, W2, known_metrics

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
