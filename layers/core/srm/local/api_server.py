"""The metrics API of ``srm run``: the Lambda function's handler behind a loopback HTTP server.

Each HTTP request becomes the API Gateway (REST, proxy integration) event the function gets on AWS, and the
handler's answer becomes the HTTP response, so what is tested here is what API Gateway serves. It runs in a process
of its own, started and restarted by the supervisor (:mod:`srm.local.runtime`), and writes its base URL to
``.srm-local/api.url`` once it listens.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from srm.local.context import LocalContext
from srm.local.store import STATE_DIR
from srm.local.threads import stop_without_supervisor

__all__ = ["ApiServer", "api_url", "gateway_event"]

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
URL_FILE = "api.url"


def api_url(state_dir: Path = STATE_DIR) -> str | None:
    """The base URL a running ``srm run`` in this working directory serves its API at."""
    try:
        return (state_dir / URL_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def gateway_event(
    method: str, target: str, headers: Mapping[str, str], body: bytes, source_ip: str = "127.0.0.1"
) -> dict[str, Any]:
    """The event API Gateway's REST proxy integration gives the function for this request (path decoded, query
    parameters single- and multi-valued, the stage ``local``)."""
    parts = urlsplit(target)
    path = unquote(parts.path) or "/"
    query = parse_qs(parts.query, keep_blank_values=True)
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers.items():
        multi_headers.setdefault(name, []).append(value)
    text: str | None = None
    encoded = False
    if body:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode(), True
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {name: values[-1] for name, values in multi_headers.items()},
        "multiValueHeaders": multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/local{path}",
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": int(time.time() * 1000),
            "protocol": "HTTP/1.1",
            "identity": {"sourceIp": source_ip},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms wait for a delayed ACK

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        event = gateway_event(self.command, self.path, dict(self.headers.items()), body, self.client_address[0])
        try:
            with self.server.one_at_a_time:
                response = self.server.handler(event, LocalContext("srm-metrics-api"))
        except Exception as e:  # API Gateway answers a failed invocation with 502; so do we, and log why
            log.error("metrics API: %s %s failed: %s", self.command, self.path, e, exc_info=True)
            failed = '{"message": "Internal server error"}'
            response = {"statusCode": 502, "headers": {"Content-Type": "application/json"}, "body": failed}
        payload = response.get("body") or ""
        data = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
        self.send_response(int(response.get("statusCode", 200)))
        headers: dict[str, list[str]] = {k: [str(v)] for k, v in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            headers[name] = [str(v) for v in values]
        for name, values in headers.items():
            if name.lower() not in ("content-length", "connection"):
                for value in values:
                    self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def __getattr__(self, name: str) -> Any:  # every method goes to the function, which names the allowed ones
        if name.startswith("do_"):
            return self._answer
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:  # access logs only when asked for (-v)
        log.debug("%s %s", self.client_address[0], format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Handler) -> None:
        super().__init__(address, _RequestHandler)
        self.handler = handler
        # A Lambda execution environment takes one event at a time, and the handler relies on it: Powertools' resolvers
        # keep the current event in class state, so concurrent requests would answer each other's routes. srm run
        # serves one API per process; a lock per server (not per process) lets tests run a gateway and its peers in
        # one process, the gateway waiting for a peer's answer.
        self.one_at_a_time = threading.Lock()


class ApiServer:
    """The API on ``127.0.0.1:port`` (0: any free port) until :meth:`stop`."""

    def __init__(self, handler: Handler, port: int = 0, state_dir: Path | None = None) -> None:
        self._server = _Server(("127.0.0.1", port), handler)
        self._state_dir = state_dir
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        self._thread.start()
        if self._state_dir is not None:
            self._state_dir.mkdir(parents=True, exist_ok=True)
            written = self._state_dir / f"{URL_FILE}.tmp"
            written.write_text(self.url + "\n")
            written.replace(self._state_dir / URL_FILE)  # whole or absent: a reader never sees half a URL
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._state_dir is not None and api_url(self._state_dir) == self.url:
            (self._state_dir / URL_FILE).unlink(missing_ok=True)


def main() -> int:
    """The API process of ``srm run``: SRM_API_PORT, SRM_API_STATE_DIR and the tables' environment (as on AWS)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for noisy in ("botocore", "boto3", "urllib3", "aws_lambda_powertools"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from srm.handlers.metrics_api import lambda_handler

    server = ApiServer(lambda_handler, int(os.environ.get("SRM_API_PORT", "0")), Path(os.environ["SRM_API_STATE_DIR"]))
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop_without_supervisor(stop)
    log.info("metrics API at %s (web view %s/ui, Swagger UI %s/swagger)", server.start(), server.url, server.url)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
