"""DynamoDB's HTTP API (JSON 1.0 protocol: ``POST /`` with ``X-Amz-Target: DynamoDB_20120810.<Operation>``) over
a :class:`~srm.local.tables.replicated.ReplicatedTables`, on 127.0.0.1: boto3 clients, Powertools and
``srm-control --local`` use it as any DynamoDB endpoint."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from srm.local.tables.engine import TableError
from srm.local.tables.replicated import StoreUnavailableError

__all__ = ["TablesServer"]

log = logging.getLogger(__name__)

_PREFIX = "DynamoDB_20120810."
_ERROR_TYPE = "com.amazonaws.dynamodb.v20120810#"


class Executor(Protocol):
    def execute(self, operation: str, request: dict[str, Any]) -> dict[str, Any]: ...


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: botocore reuses its connections
    disable_nagle_algorithm = True  # the headers and the body are two writes: Nagle would hold the body 40 ms
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        target = self.headers.get("X-Amz-Target", "")
        if not target.startswith(_PREFIX):
            self._answer(400, _error("UnknownOperationException", f"not a DynamoDB request: {target or 'no target'}"))
            return
        operation = target[len(_PREFIX) :]
        try:
            request = json.loads(body or b"{}")
            response = self.server.executor.execute(operation, request)
        except TableError as e:
            payload = _error(e.code, e.message)
            if e.reasons is not None:
                payload["CancellationReasons"] = e.reasons
            self._answer(400, payload)
        except StoreUnavailableError as e:
            self._answer(503, _error("ServiceUnavailable", str(e)))
        except json.JSONDecodeError as e:
            self._answer(400, _error("SerializationException", f"the request is not JSON: {e}"))
        except Exception as e:  # a bug: answered as a server error, which clients retry
            log.exception("store: %s failed", operation)
            self._answer(500, _error("InternalServerError", f"{type(e).__name__}: {e}"))
        else:
            self._answer(200, response)

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-amzn-RequestId", uuid.uuid4().hex)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up waiting (its timeout): it retries on its own

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the run's log


def _error(code: str, message: str) -> dict[str, Any]:
    return {"__type": _ERROR_TYPE + code, "message": message}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("store: a connection from %s failed", client_address, exc_info=True)

    def __init__(self, port: int, executor: Executor) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.executor = executor


class TablesServer:
    """Serves ``executor`` on 127.0.0.1:``port`` (0: any free port) on a thread of its own."""

    def __init__(self, executor: Executor, port: int = 0) -> None:
        self._server = _Server(port, executor)
        self._thread = threading.Thread(target=self._server.serve_forever, name="store-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
