"""srm.handlers.metrics_api: every route through the Lambda handler with API Gateway REST proxy events, on moto
tables written through the adapters with known values (the ``tables`` fixture); the committed OpenAPI spec equals the
generated one. Over HTTP: test_metrics_api_server.py; remote querying: test_metrics_api_remote.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, get_args

import pytest

from srm.app import App
from srm.control.metrics import METRICS, BadRequestError, MetricName, MetricQueries
from srm.handlers.metrics_api import lambda_handler, openapi_json
from srm.metrics.model.names import TABLE_ATTRIBUTES
from tests.support.events import load_event
from tests.support.metrics_api import LATENCY_1, LATENCY_2, NOW, OLD, W1, W2
from tests.unit.metrics_api_access import SPEC

CONTEXT = SimpleNamespace(
    function_name="metrics-api",
    memory_limit_in_mb=256,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:metrics-api",
    aws_request_id="req-1",
)


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
    queries = MetricQueries(app.config_store, app.state, app.metrics_store)
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


def test_an_empty_config_table_answers_503_saying_to_import_a_configuration(tables: dict[str, Any]) -> None:
    # GIVEN a deployment whose config table holds nothing (deployed, no configuration imported yet)
    db = tables["db"]
    for item in db.scan(TableName="config")["Items"]:
        db.delete_item(TableName="config", Key={"id": item["id"], "sk": item["sk"]})

    # WHEN the API is asked for its replications
    status, body = get("/v2/replications")

    # THEN it says why it cannot answer, in one line, rather than failing the invocation
    assert status == 503
    assert "import a configuration first" in body["message"] and "\n" not in body["message"]


def call(method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], dict[str, Any]]:
    event = load_event("api_gateway_metrics.json")
    event.update(path=path, httpMethod=method, queryStringParameters=None, multiValueQueryStringParameters=None)
    event["requestContext"].update(path="/prod" + path, httpMethod=method)
    event["body"] = None if body is None else json.dumps(body)
    response = lambda_handler(event, CONTEXT)
    return response["statusCode"], json.loads(response["body"]), response["multiValueHeaders"]


def test_connector_offsets_name_a_flow_else_404_listing_the_names(tables: dict[str, Any]) -> None:
    status, body, _ = call("GET", "/connectors/nope/offsets")
    assert status == 404 and body["message"].startswith("unknown connector 'nope'") and "a->b, a->c" in body["message"]
    status, body, _ = call("GET", "/connectors/MirrorSourceConnector/offsets")  # four flows here: which one?
    assert status == 404 and "ambiguous here: 4 flows" in body["message"]


def test_connector_offsets_take_connects_methods_and_refuse_a_bad_body_before_asking_kafka(
    tables: dict[str, Any],
) -> None:
    status, body, headers = call("POST", "/connectors/a->b/offsets")
    assert status == 405 and headers["Allow"] == ["GET, PATCH, DELETE"]
    wrong = {"offsets": [{"partition": {"cluster": "c", "topic": "orders", "partition": 0}, "offset": {"offset": 1}}]}
    status, body, _ = call("PATCH", "/connectors/a->b/offsets", wrong)
    assert status == 400 and "\"cluster\" must be 'a'" in body["message"]
    status, body, _ = call("PATCH", "/connectors/a->b/offsets", {"offsets": "all"})
    assert status == 400
