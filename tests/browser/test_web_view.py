"""The web view (``/ui``) in a real headless chromium (Debian's, driven through its chromedriver by Selenium): the
metrics API's handler behind the local HTTP server on moto tables with known windows; the page must show every flow
with its status, the selected flow's topics, charts with the known points, empty states, and the API's errors."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from srm.app import App
from srm.aws.nodes import DynamoDBNodes
from srm.control.metrics import MetricQueries
from srm.handlers.metrics_api import lambda_handler
from srm.local.api_server import ApiServer
from srm.metrics.model.series import MetricPoint, Series
from srm.state.nodes import MemberRecord, NodeRecord
from tests.support.metrics_api import LATENCY_1, LATENCY_2, NOW, OLD, W1, W2, known_metrics, window

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
# Without the background-networking flags chromium keeps dialling out and hangs on the refused connections here.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1100",
)
SCREENSHOT = Path(tempfile.gettempdir()) / "srm-web-view.png"
WAIT_S = 30  # generous: two shared cores
CHARTS = ("throughput", "latency", "lag", "age", "verify")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"no {' and '.join(missing)}: `make install` installs Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)  # with both paths given Selenium Manager downloads nothing
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    with known_metrics(monkeypatch) as made:
        yield made


@pytest.fixture
def server(tables: dict[str, Any]) -> Iterator[ApiServer]:
    api = ApiServer(lambda_handler)
    api.start()
    yield api
    api.stop()


def open_view(browser: webdriver.Chrome, url: str) -> None:
    browser.get("about:blank")  # a page load each time, even where only the fragment differs
    browser.get(url)
    refreshed(browser, 1)


def refreshed(browser: webdriver.Chrome, at_least: int) -> int:
    def count(d: webdriver.Chrome) -> int:
        return int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0)

    WebDriverWait(browser, WAIT_S).until(lambda d: count(d) >= at_least)
    return count(browser)


def until(browser: webdriver.Chrome, what: str, check: Any) -> None:
    try:
        WebDriverWait(browser, WAIT_S).until(check)
    except TimeoutException:
        pytest.fail(f"the page never showed {what}; errors shown: {text(browser, '#errors')!r}")


def text(browser: webdriver.Chrome, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def rows(browser: webdriver.Chrome, table: str) -> list[list[str]]:
    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
    ]


def charts(browser: webdriver.Chrome) -> dict[str, tuple[str, int]]:
    """Each chart's state and the number of points it drew."""
    return {
        name: (str(f.get_attribute("data-state")), int(f.get_attribute("data-points") or -1))
        for name in CHARTS
        for f in [browser.find_element(By.ID, f"chart-{name}")]
    }


def plotted(browser: webdriver.Chrome, name: str) -> list[list[float | None]]:
    """What uPlot holds for a chart: x (epoch seconds), then one list per line."""
    data = browser.execute_script(f"return window.srmCharts[{name!r}].data")
    return [list(column) for column in data]


def test_flows_topics_and_charts_with_the_known_points(browser: webdriver.Chrome, server: ApiServer) -> None:
    open_view(browser, f"{server.url}/ui")
    until(browser, "every chart drawn", lambda d: all(s == "ready" for s, _ in charts(d).values()))
    statuses = {tr.get_attribute("data-flow"): tr for tr in browser.find_elements(By.CSS_SELECTOR, "#flows tbody tr")}
    assert {flow: tr.find_element(By.CLASS_NAME, "status").text for flow, tr in statuses.items()} == {
        "a->b": "ACTIVE",
        "a->c": "DISABLED",
        "b->a": "INACTIVE",
        "c->a": "FAILING",
    }
    assert "selected" in str(statuses["a->b"].get_attribute("class"))  # the first active flow, with no fragment
    assert statuses["a->b"].text.startswith("a → b ACTIVE 1")  # flow, status, topics
    assert text(browser, "#topics-flow") == "a → b"
    assert [r[:4] for r in rows(browser, "topics")] == [["orders", "a.orders", "ACTIVE", "2"]]
    assert rows(browser, "flows")[0][4:6] == ["18 ms", "110 ms"]  # latency p50, p99
    assert text(browser, "#charted") == "a → b"
    # the flow's windows in the last 2 hours: OLD, W1, W2 (records 1000, 100, 50; lag 40, 7, 3)
    assert charts(browser) == {name: ("ready", 3) for name in CHARTS}
    seconds = [OLD / 1000, W1 / 1000, W2 / 1000]
    assert plotted(browser, "throughput") == [seconds, pytest.approx([1000 / 60, 100 / 60, 50 / 60])]
    p50, p99 = [[lat[q] for lat in (LATENCY_1, LATENCY_1, LATENCY_2)] for q in ("p50", "p99")]
    assert plotted(browser, "latency") == [seconds, p50, p99]
    assert plotted(browser, "lag") == [seconds, [40, 7, 3]]
    assert plotted(browser, "age") == [seconds, [4000, 700, 300]]
    # records compared and differences found, two metrics joined by window on one chart
    assert plotted(browser, "verify") == [seconds, [1000, 100, 50], [0, 1, 0]]
    assert browser.find_element(By.ID, "errors").is_displayed() is False
    browser.save_screenshot(str(SCREENSHOT))
    print(f"screenshot of the web view: {SCREENSHOT}")

    # a click on a topic charts the topic: its windows W1 and W2
    browser.find_element(By.CSS_SELECTOR, '#topics tr[data-topic="orders"]').click()
    until(browser, "the topic's charts", lambda d: text(d, "#charted") == "a → b / orders")
    until(browser, "the topic's points", lambda d: all(v == ("ready", 2) for v in charts(d).values()))
    assert browser.current_url.endswith("/ui#/a/b/orders")
    assert plotted(browser, "lag") == [[W1 / 1000, W2 / 1000], [7, 3]]
    assert plotted(browser, "age") == [[W1 / 1000, W2 / 1000], [700, 300]]
    assert plotted(browser, "verify") == [[W1 / 1000, W2 / 1000], [100, 50], [1, 0]]
    assert plotted(browser, "latency")[1:] == [
        [LATENCY_1["p50"], LATENCY_2["p50"]],
        [LATENCY_1["p99"], LATENCY_2["p99"]],
    ]
    browser.save_screenshot(str(SCREENSHOT.with_name("srm-web-view-topic.png")))
    uncaught = [e["message"] for e in browser.get_log("browser") if "Uncaught" in e["message"]]
    assert uncaught == []


def test_behind_a_stage_prefix_the_page_asks_the_api_beside_it(
    tables: dict[str, Any], browser: webdriver.Chrome
) -> None:
    # API Gateway serves the stage under /prod and hands the function the path without it
    def staged(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if not event["path"].startswith("/prod/"):
            return {"statusCode": 403, "body": '{"message": "Missing Authentication Token"}'}
        return lambda_handler({**event, "path": event["path"].removeprefix("/prod")}, context)

    api = ApiServer(staged)
    api.start()
    try:
        open_view(browser, f"{api.url}/prod/ui")
        until(browser, "the flow's charts", lambda d: all(v == ("ready", 3) for v in charts(d).values()))
        assert len(rows(browser, "flows")) == 4 and not browser.find_element(By.ID, "errors").is_displayed()
    finally:
        api.stop()


def test_refreshes_by_itself_and_draws_new_windows(
    browser: webdriver.Chrome, server: ApiServer, tables: dict[str, Any]
) -> None:
    open_view(browser, f"{server.url}/ui?refresh=1")
    until(browser, "the flow's points", lambda d: charts(d)["throughput"] == ("ready", 3))
    w3 = NOW - 60_000
    App.current().metrics_store.write([MetricPoint(Series("1m", "flow", "a", "b"), w3, window(30, 1, LATENCY_2))])
    # each chart fetches its own series, so one may see the new window a refresh before another
    until(browser, "the new window", lambda d: all(v == ("ready", 4) for v in charts(d).values()))
    assert plotted(browser, "lag")[1] == [40, 7, 3, 1]


def test_a_flow_without_data_says_so(browser: webdriver.Chrome, server: ApiServer) -> None:
    open_view(browser, f"{server.url}/ui#/b/a")
    until(browser, "empty charts", lambda d: all(v == ("empty", 0) for v in charts(d).values()))
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".chart .empty")] == ["No data yet."] * len(CHARTS)
    assert text(browser, "#topics-empty") == "No topics replicated yet."
    assert "selected" in str(
        browser.find_element(By.CSS_SELECTOR, '#flows tr[data-flow="b->a"]').get_attribute("class")
    )
    assert browser.find_element(By.ID, "errors").is_displayed() is False


def test_an_api_error_is_shown_with_its_message(browser: webdriver.Chrome, server: ApiServer) -> None:
    open_view(browser, f"{server.url}/ui#/a/x")
    until(browser, "the error", lambda d: d.find_element(By.ID, "errors").is_displayed())
    [error] = browser.find_elements(By.CSS_SELECTOR, "#errors li")  # topics and every chart: one answer
    assert "unknown cluster 'x'" in error.text and "HTTP 404" in error.text and f"and {len(CHARTS)} more" in error.text
    assert {state for state, _ in charts(browser).values()} == {"error"}
    assert text(browser, "#topics-empty") == "Could not load the topics (see the error above)."
    assert len(rows(browser, "flows")) == 4  # the rest of the page still works
    browser.save_screenshot(str(SCREENSHOT.with_name("srm-web-view-error.png")))


def test_a_failing_api_is_shown_not_a_blank_page(
    browser: webdriver.Chrome, server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: MetricQueries) -> None:
        raise RuntimeError("the metrics table is unreachable")

    monkeypatch.setattr(MetricQueries, "replications", broken)
    open_view(browser, f"{server.url}/ui")
    error = text(browser, "#errors")
    assert "HTTP 502" in error and "Internal server error" in error
    assert "unreachable" not in error  # the server's detail stays in its log
    assert text(browser, "#flows-empty") == "Could not load the flows (see the error above)."


def test_the_nodes_of_an_srm_run_cluster_show_who_leads_and_holds_what(
    tables: dict[str, Any], browser: webdriver.Chrome, server: ApiServer
) -> None:
    # GIVEN two live nodes of the cluster (its default group id: the config's aliases), one leading a->b
    now = int(time.time() * 1000)
    nodes = DynamoDBNodes(tables["db"], "state", "srm-a-b-c")
    for node, pid in (("host1-aa", 11), ("host2-bb", 22)):
        nodes.put_node(NodeRecord(node, node.split("-")[0], pid, f"/srv/{node}", "token", now - 60_000, now))
    nodes.put_member(MemberRecord("host1-aa", "a", "b", True, {"orders": (0,), "heartbeats": (0,)}, now - 5_000, now))
    nodes.put_member(MemberRecord("host2-bb", "a", "b", False, {"orders": (1,)}, now - 5_000, now))
    # WHEN the page is opened THEN its nodes table shows each node, what it leads, and the partitions it holds
    open_view(browser, f"{server.url}/ui")
    until(browser, "the nodes", lambda d: len(rows(d, "nodes")) == 2)
    assert text(browser, "#nodes-group") == "srm-a-b-c"
    assert [r[:5] for r in rows(browser, "nodes")] == [
        ["host1-aa", "yes", "host1:11", "a->b", "a->b heartbeats 0; a->b orders 0"],
        ["host2-bb", "yes", "host2:22", "–", "a->b orders 1"],
    ]
