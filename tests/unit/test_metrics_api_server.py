"""The metrics API over HTTP in the local runtime: ``srm run``'s server in front of the handler, ``srm metrics``
reading it, and every route against the committed OpenAPI spec."""

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
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from srm.handlers.metrics_api import lambda_handler
from srm.local.api_server import ApiServer, api_url, gateway_event
from srm.local.store import free_port
from tests.support.metrics_api import W1, W2
from tests.unit.metrics_api_access import SPEC, srm_metrics


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


def test_a_body_that_is_not_utf8_json_is_refused_with_a_message(server: ApiServer) -> None:
    for kind, status in (("application/json", 400), ("text/plain", 415)):
        got = requests.get(
            f"{server.url}/v2/replications", data=b"{\x8f\xff}", headers={"Content-Type": kind}, timeout=10
        )
        assert got.status_code == status and "the body must be JSON" in got.json()["message"]


def test_gateway_event_decodes_path_and_query_as_api_gateway_does() -> None:
    event = gateway_event("GET", "/v2/topic-metrics/a/b/my%20topic/record-count?from=1&to=2&to=3", {"X": "y"}, b"")
    assert event["path"] == "/v2/topic-metrics/a/b/my topic/record-count"
    assert event["queryStringParameters"] == {"from": "1", "to": "3"}
    assert event["multiValueQueryStringParameters"] == {"from": ["1"], "to": ["2", "3"]}
    assert event["headers"] == {"X": "y"} and event["body"] is None and event["requestContext"]["stage"] == "local"


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


def ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a script starts


@pytest.mark.parametrize("started", [None, ignoring_sigint], ids=["from-a-terminal", "sigint-ignored"])
def test_srm_metrics_refreshes_until_ctrl_c(server: ApiServer, tmp_path: Path, started) -> None:
    cmd = [sys.executable, "-m", "srm.cli.srm", "metrics", "--json", "--interval", "0.2", "--url", server.url]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=started) as watching:
        assert watching.stdout is not None
        documents = [json.loads(watching.stdout.readline()) for _ in range(3)]
        watching.send_signal(signal.SIGINT)
        watching.communicate(timeout=30)  # read on: a full pipe would hold its last write, and its exit, up
        assert watching.returncode == 0
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
