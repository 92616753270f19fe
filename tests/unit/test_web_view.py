"""The web view's page as the metrics API function serves it (``GET /ui``), and its files as package data; the page
itself is exercised in a real browser by tests/browser."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from types import SimpleNamespace

from srm.handlers.metrics_api import WEB, lambda_handler, openapi_json
from tests.support.events import load_event

ROOT = Path(__file__).resolve().parents[2]
SRM = ROOT / "layers" / "core" / "srm"
CONTEXT = SimpleNamespace(
    function_name="metrics-api",
    memory_limit_in_mb=256,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:metrics-api",
    aws_request_id="req-1",
)


def served_page() -> tuple[int, dict[str, list[str]], str]:
    event = load_event("api_gateway_metrics.json")
    event.update(path="/ui", resource="/ui", pathParameters=None)
    event.update(queryStringParameters=None, multiValueQueryStringParameters=None)
    event["requestContext"].update(path="/prod/ui", resourcePath="/ui")
    response = lambda_handler(event, CONTEXT)
    return response["statusCode"], response["multiValueHeaders"], response["body"]


def test_the_page_is_one_response_with_its_script_styles_and_chart_library_inlined() -> None:
    status, headers, page = served_page()
    assert status == 200 and headers["Content-Type"] == ["text/html; charset=utf-8"]
    assert "<!-- inline:" not in page
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)=", page)  # nothing loaded from elsewhere: no CDN
    for name in ("view.js", "view.css", "uplot/uPlot.iife.min.js", "uplot/uPlot.min.css"):
        assert (WEB / name).read_text(encoding="utf-8") in page, name


def test_the_vendored_chart_library_is_the_version_its_readme_names() -> None:
    named = re.match(r"# uPlot (\S+) \(vendored\)", (WEB / "uplot" / "README.md").read_text(encoding="utf-8"))
    banner = re.match(r"/\*! \S+ \(v(\S+)\) \*/", (WEB / "uplot" / "uPlot.iife.min.js").read_text(encoding="utf-8"))
    assert named and banner and named.group(1) == banner.group(1)
    assert "MIT License" in (WEB / "uplot" / "LICENSE").read_text(encoding="utf-8")


def test_the_web_view_is_not_in_the_api_spec() -> None:
    assert "/ui" not in json.loads(openapi_json())["paths"]


def test_every_web_view_file_is_package_data() -> None:
    # `pip install .` carries only what these globs match (the Lambda layer's build copies layers/core whole)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["srm"]
    carried = {p for g in globs for p in SRM.glob(g) if p.is_file()}
    files = {p for p in (SRM / "handlers" / "web").rglob("*") if p.is_file()}
    assert files and files <= carried, sorted(str(p.relative_to(SRM)) for p in files - carried)
