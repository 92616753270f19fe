"""The metrics API function (API Gateway REST proxy): flows, their topics and metric series, as JSON.

Routes and validation are Powertools' event handler; its OpenAPI generation gives the committed spec
(``python -m srm.handlers.metrics_api > openapi/metrics-api.json`` regenerates it) and Swagger UI at ``/swagger``.
``/ui`` is the web view: the page in ``web/`` (beside this module) with its script, styles and the vendored chart
library inlined.
The queries are :mod:`srm.control.metrics`; remote querying (a gateway's merged flows, other deployments' flows
answered by them) is :mod:`srm.control.remote`. ``/connectors/<name>/offsets`` is Kafka Connect's offsets API
(KIP-875) for this deployment's flows, each a ``MirrorSourceConnector`` named ``<source>-><target>``
(:mod:`srm.control.replication_offsets`); it is answered here only, never forwarded to a peer.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import sys
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any, Literal, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel

from srm.app.metrics_api import MetricsApiWiring
from srm.config.connectors import source_connector_names
from srm.config.settings import SrmConfig
from srm.control.edits import ControlError
from srm.control.metrics import (
    BadRequestError,
    Deployment,
    MetricName,
    MetricQueries,
    MetricSeries,
    NotFoundError,
    Replications,
    Topics,
)
from srm.control.nodes import NodesView, nodes_status
from srm.control.remote import FORWARDED_HEADER, PeerAnswer, PeerUnavailableError
from srm.control.replication_offsets import ReplicationOffsets, ReplicationRunningError
from srm.core.replication_offsets import (
    ConnectOffsetsError,
    Move,
    MoveTo,
    connect_offsets,
    connector_flow,
    connector_names,
    parse_connect_offsets,
)
from srm.errors import SrmError

__all__ = ["api", "lambda_handler", "openapi_json"]

logger = Logger(service="srm-metrics-api")
api = APIGatewayRestResolver(enable_validation=True)
ROUTES = (
    "/v2/replications",
    "/v2/replications/<source>/<target>/topics",
    "/v2/cluster-metrics/<source>/<target>/<metric>",
    "/v2/topic-metrics/<source>/<target>/<upstreamTopic>/<metric>",
    "/v2/partition-metrics/<source>/<target>/<upstreamTopic>/<partition>/<metric>",
    "/v2/nodes",
)
CONNECTORS = "/connectors"  # Kafka Connect's list of connectors: the flows' MirrorSourceConnectors
CONNECTOR_OFFSETS = "/connectors/<name>/offsets"  # Kafka Connect's offsets API (KIP-875)
METHODS = {**dict.fromkeys((*ROUTES, CONNECTORS), ("GET",)), CONNECTOR_OFFSETS: ("GET", "PATCH", "DELETE")}
OFFSETS_TIMEOUT_S = 10.0  # API Gateway answers within 29 s; a move may ask the source several times
TITLE = "serverless-srm metrics API"
VERSION = "2"
DESCRIPTION = (
    "Replication metrics of the flows this deployment runs (MM2/SRM metric names; times in epoch ms). A gateway "
    "(remote querying) also lists other deployments' flows and answers for them by asking the deployment that runs "
    f"them; a request with the `{FORWARDED_HEADER}` header is answered from this deployment's own data only."
)
# Powertools inlines Swagger UI's script and styles into the page (no swagger_base_url): it works offline
api.enable_swagger(path="/swagger", title=TITLE, version=VERSION, description=DESCRIPTION)

Resolution = Annotated[Literal["1m", "1h"], Query(description="window size of the points")]
From = Annotated[int | None, Query(alias="from", description="epoch ms; default: `to` − 2 hours")]
To = Annotated[int | None, Query(alias="to", description="epoch ms; default: now")]
Metric = Annotated[MetricName, Path(description="the metric (MM2's and SRM's names)")]
_Handler = TypeVar("_Handler", bound=Callable[..., Any])


class ErrorMessage(BaseModel):
    message: str


def _errors(*codes: int) -> dict[int, OpenAPIResponse]:
    what = {
        400: "Unknown metric, bad time range or resolution",
        404: "Unknown flow, cluster, topic or partition",
        502: "The flow is another deployment's, which did not answer",
    }
    return {c: {"description": what[c], "content": {"application/json": {"model": ErrorMessage}}} for c in codes}


def _queries() -> MetricQueries:
    app = MetricsApiWiring.current()
    return MetricQueries(app.config_store, app.state, app.metrics_store)


def _here() -> tuple[MetricsApiWiring, SrmConfig, Deployment]:
    app = MetricsApiWiring.current()
    config = app.config()
    context = api.current_event.request_context
    request_url = f"https://{context.domain_name}/{context.stage}" if context.domain_name else None
    return app, config, app.deployment(config, request_url)


def _forwarded() -> bool:
    return bool(api.current_event.headers.get(FORWARDED_HEADER))


def _ask_owner(source: str, target: str) -> None:
    """Another deployment's flow: its answer, raised as :class:`PeerAnswer` (a gateway's remote querying)."""
    if _forwarded():
        return
    app, config, me = _here()
    if (source, target) not in config.flows:
        event = api.current_event
        query = event.multi_value_query_string_parameters or {}
        app.gateway().ask_owner(config, me, source, target, event.path, query)


def _error(status: int, message: str) -> Response[str]:
    return Response(status_code=status, content_type="application/json", body=json.dumps({"message": message}))


@api.exception_handler(NotFoundError)
def _not_found(e: NotFoundError) -> Response[str]:
    return _error(404, str(e))


@api.exception_handler(BadRequestError)
def _bad_request(e: BadRequestError) -> Response[str]:
    return _error(400, str(e))


@api.exception_handler(PeerAnswer)
def _peer_answer(e: PeerAnswer) -> Response[str]:
    body = e.answer.body.decode(errors="replace")
    served = {"X-Srm-Served-By": e.peer.name}
    return Response(e.answer.status, e.answer.content_type or "application/json", body, headers=served)


@api.exception_handler(PeerUnavailableError)
def _peer_unavailable(e: PeerUnavailableError) -> Response[str]:
    return _error(502, str(e))


@api.exception_handler(SrmError)
def _unavailable(e: SrmError) -> Response[str]:
    # the deployment cannot answer yet (its config table empty or unreadable): its one-line reason, not a 502
    logger.warning("metrics API cannot answer: %s", e)
    return _error(503, str(e))


@api.exception_handler(RequestValidationError)
def _invalid(e: RequestValidationError) -> Response[str]:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'request'}: {err.get('msg')}" for err in e.errors()
    )
    return _error(400, problems)


@api.exception_handler(ReplicationRunningError)
def _running(e: ReplicationRunningError) -> Response[str]:
    return _error(400, str(e))  # what Connect answers for a connector that is not stopped


@api.exception_handler(ConnectOffsetsError)
def _bad_offsets(e: ConnectOffsetsError) -> Response[str]:
    return _error(400, str(e))


@api.exception_handler(ControlError)
def _refused(e: ControlError) -> Response[str]:
    return _error(404 if isinstance(e, LookupError) else 400, str(e))


@api.not_found
def _no_route(_: Exception) -> Response[str]:
    path, method = api.current_event.path, api.current_event.http_method
    for route, allowed in METHODS.items():
        if method not in allowed and re.fullmatch(re.sub(r"<[^>]+>", "[^/]+", route), path):
            response = _error(405, f"{method} is not allowed on {path}; use {', '.join(allowed)}")
            response.headers["Allow"] = ", ".join(allowed)
            return response
    # a GET here has a route's shape but characters the router does not take in a path parameter
    return _error(404, f"no such route: {path} (routes: {', '.join(METHODS)})")


@api.get(
    ROUTES[0], summary="Every flow with its status and figures over the last 5 minutes (a gateway's: every peer's too)"
)
def replications() -> Replications:
    app, config, me = _here()
    return app.gateway().replications(config, me, _queries().replications(), forwarded=_forwarded())


def _flow_route(route: str, summary: str) -> Callable[[_Handler], _Handler]:
    """A GET route about one flow: the flow's data, or 400, 404 or 502 (its deployment did not answer)."""
    return api.get(route, summary=summary, responses=_errors(400, 404, 502))


def _series(
    metric: str,
    source: str,
    target: str,
    topic: str | None = None,
    partition: int | None = None,
    *,
    from_: int | None,
    to: int | None,
    resolution: str,
) -> MetricSeries:
    """A metric of the flow, or of a topic (and a partition) of it, as the flow's deployment answers it."""
    _ask_owner(source, target)
    return _queries().series(metric, source, target, topic, partition, from_ms=from_, to_ms=to, resolution=resolution)


@_flow_route(ROUTES[1], "The topics of a flow with their figures")
def topics(source: str, target: str) -> Topics:
    _ask_owner(source, target)
    return _queries().topics(source, target)


@_flow_route(ROUTES[2], "A metric of a flow over time")
def cluster_metrics(
    source: str, target: str, metric: Metric, from_: From = None, to: To = None, resolution: Resolution = "1m"
) -> MetricSeries:
    return _series(metric, source, target, from_=from_, to=to, resolution=resolution)


@_flow_route(ROUTES[3], "A metric of a topic over time")
def topic_metrics(
    source: str,
    target: str,
    upstreamTopic: str,  # the route's name
    metric: Metric,
    from_: From = None,
    to: To = None,
    resolution: Resolution = "1m",
) -> MetricSeries:
    return _series(metric, source, target, upstreamTopic, from_=from_, to=to, resolution=resolution)


@_flow_route(ROUTES[4], "A metric of one partition of a topic over time")
def partition_metrics(
    source: str,
    target: str,
    upstreamTopic: str,  # the route's name
    partition: int,
    metric: Metric,
    from_: From = None,
    to: To = None,
    resolution: Resolution = "1m",
) -> MetricSeries:
    return _series(metric, source, target, upstreamTopic, partition, from_=from_, to=to, resolution=resolution)


class ConnectPartition(BaseModel):
    cluster: str  # the flow's source alias
    topic: str
    partition: int


class ConnectOffset(BaseModel):
    offset: int  # the last replicated record's offset, as MirrorMaker 2 stores it: the next one replicated is +1


class ConnectPartitionOffset(BaseModel):
    partition: ConnectPartition
    offset: ConnectOffset | None  # null in a PATCH: the partition starts over where auto.offset.reset says


class ConnectOffsets(BaseModel):
    offsets: list[ConnectPartitionOffset]


class MovedPartition(BaseModel):
    topic: str
    partition: int
    old: int | None  # the next record replicated before (null: none committed)
    new: int
    skipped: int | None  # records never replicated because of the move
    replayed: int  # records replicated again: duplicates on the target
    note: str


class OffsetsChanged(BaseModel):
    message: str
    partitions: list[MovedPartition]


ConnectorName = Annotated[
    str,
    Path(
        description="`<source>-><target>`, the flow's MirrorSourceConnector's name in its connector definitions, or "
        "`MirrorSourceConnector` where one flow runs"
    ),
]


@api.get(
    CONNECTORS,
    summary="The flows' MirrorSourceConnectors by name, as Kafka Connect lists its connectors: the name their "
    "connector definitions give, else <source>-><target>",
)
def connectors() -> list[str]:
    config = MetricsApiWiring.current().config()
    return connector_names(config.flows, source_connector_names(config))


def _connector(name: str) -> ReplicationOffsets:
    """The flow a connector name means, with its source positions (404 for an unknown name)."""
    app = MetricsApiWiring.current()
    config = app.config()
    try:
        flow = connector_flow(name, config.flows, source_connector_names(config))
    except LookupError as e:
        raise NotFoundError(str(e)) from None
    admin = app.kafka.admin(config, flow.source, flow)
    return ReplicationOffsets(config, flow, admin, app.state, timeout=OFFSETS_TIMEOUT_S, resolver=app.kafka.resolver)


def _changed(offsets: ReplicationOffsets, moves: list[Move], message: str) -> OffsetsChanged:
    name = str(offsets.flow)
    hint = f"stop it first: srm-control flows disable '{name}' (Connect's PUT /connectors/{name}/stop)"
    reason = f"skipped through the offsets API (/connectors/{name}/offsets)"
    offsets.apply(moves, reason=reason, running_hint=hint)
    return OffsetsChanged(message=message, partitions=[MovedPartition(**m.to_dict()) for m in moves])


_OFFSETS_ERRORS = {
    400: "The flow is replicating (stop it first), a bad body, or a topic or partition the flow does not replicate",
    404: "Unknown connector",
    415: "A body that is not JSON",
    503: "The source cluster or the state does not answer",
}


def _offsets_errors(*codes: int) -> dict[int, OpenAPIResponse]:
    return {
        c: {"description": _OFFSETS_ERRORS[c], "content": {"application/json": {"model": ErrorMessage}}} for c in codes
    }


@api.get(
    CONNECTOR_OFFSETS,
    summary="Where replication of each source partition of a flow stands, as Kafka Connect's offsets API shows a "
    "MirrorSourceConnector's (partitions with a committed position)",
    responses=_offsets_errors(404, 503),
)
def connector_offsets(name: ConnectorName) -> ConnectOffsets:
    offsets = _connector(name)
    return ConnectOffsets.model_validate(connect_offsets(offsets.flow.source, offsets.positions()))


@api.patch(
    CONNECTOR_OFFSETS,
    summary="Move the positions of some source partitions (the flow must be stopped): Connect's alter offsets",
    responses=_offsets_errors(400, 404, 415, 503),
)
def alter_connector_offsets(name: ConnectorName, body: Annotated[ConnectOffsets, Body()]) -> OffsetsChanged:
    offsets = _connector(name)
    wanted = parse_connect_offsets(offsets.flow.source, body.model_dump())
    moves = offsets.plan_each(wanted)
    return _changed(offsets, moves, "The offsets for this connector have been altered successfully")


@api.delete(
    CONNECTOR_OFFSETS,
    summary="Start every source partition over where auto.offset.reset says (the flow must be stopped): Connect's "
    "reset offsets",
    responses=_offsets_errors(400, 404, 503),
)
def reset_connector_offsets(name: ConnectorName) -> OffsetsChanged:
    offsets = _connector(name)
    moves = offsets.plan(MoveTo(offsets.start_from))
    return _changed(offsets, moves, "The offsets for this connector have been reset successfully")


WEB = resources.files("srm.handlers") / "web"  # package data, not a package: every handler module is a function
INLINE = re.compile(r"<!-- inline:(\S+) -->")


@functools.cache
def web_view() -> str:
    """The web view's page with every ``<!-- inline:file -->`` replaced by that file (a script or styles)."""

    def inline(marker: re.Match[str]) -> str:
        name = marker.group(1)
        tag = "style" if name.endswith(".css") else "script"
        text = (WEB / name).read_text(encoding="utf-8")
        if f"</{tag}" in text.lower():  # would end the element early; no vendored release has done so
            raise ValueError(f"{name} contains </{tag}: it cannot be inlined")
        return f"<{tag}>\n{text}\n</{tag}>"

    return INLINE.sub(inline, (WEB / "index.html").read_text(encoding="utf-8"))


@api.get(
    ROUTES[5],
    summary="The nodes of this srm run cluster: alive or not, the flows each leads, the partitions each holds, its "
    "last rebalance (none on AWS)",
)
def nodes() -> NodesView:
    app, config, _ = _here()
    return NodesView.of(nodes_status(app.nodes(config), config.flows))


@api.get("/ui", include_in_schema=False)
def ui() -> Response[str]:
    return Response(200, "text/html; charset=utf-8", web_view(), headers={"Cache-Control": "no-cache"})


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _unsupported_body(event) or api.resolve(event, context)


def _unsupported_body(event: dict[str, Any]) -> dict[str, Any] | None:
    """415 for a request body that is not JSON (the only bodies the API takes, as Connect's): Powertools' validation
    would otherwise fail on, say, a multipart body without its boundary."""
    if not event.get("body"):
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    kind = headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        if not event.get("isBase64Encoded"):
            return None
        try:  # Powertools decodes it as UTF-8 and would fail with a 500
            base64.b64decode(event["body"]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return _body_refused(400, "the body must be JSON in UTF-8")
        return None
    return _body_refused(415, f"the body must be JSON (Content-Type: application/json), not {kind or 'none'}")


def _body_refused(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "body": json.dumps({"message": message}),
        "isBase64Encoded": False,
    }


def openapi_json() -> str:
    return api.get_openapi_json_schema(title=TITLE, version=VERSION, description=DESCRIPTION)


if __name__ == "__main__":
    sys.stdout.write(openapi_json() + "\n")
