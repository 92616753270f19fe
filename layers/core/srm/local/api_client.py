"""A reader of the metrics API — ``srm run``'s, or a deployment's on AWS (SigV4-signed with your credentials, as
remote querying signs): what ``srm metrics`` and ``srm demo`` show."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from srm.aws.api_client import PeerApiClient, PeerUnreachableError
from srm.errors import SrmError
from srm.local.api_server import api_url
from srm.local.store import STATE_DIR

__all__ = ["ApiError", "MetricsApiClient", "find_api_url"]


class ApiError(SrmError):
    """The API did not answer, or answered with an error."""


def find_api_url(url: str | None = None, state_dir: Path = STATE_DIR) -> str:
    """``url``, else the API of the ``srm run`` started in this working directory."""
    found = url or api_url(state_dir)
    if not found:
        raise ApiError(
            f"no srm run found here ({state_dir / 'api.url'} is missing): start `srm run --config FILE` in this "
            "directory, or pass --url http://HOST:PORT"
        )
    return found.rstrip("/")


class MetricsApiClient:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = PeerApiClient(connect_timeout_s=min(timeout, 5.0), read_timeout_s=timeout)

    def get(self, path: str, **query: object) -> Any:
        """The JSON answer of ``GET path?query``; a one-line :class:`ApiError` on any failure."""
        url = self.base_url + urllib.parse.quote(path)
        if query:
            url += "?" + urllib.parse.urlencode({k: str(v) for k, v in query.items() if v is not None})
        try:
            answer = self._http.get(url, {"Accept": "application/json"})
        except PeerUnreachableError as e:
            raise ApiError(f"the metrics API at {self.base_url} does not answer ({e}); is srm run running?") from None
        try:
            body = json.loads(answer.body)
        except ValueError:
            raise ApiError(f"{url}: HTTP {answer.status}: the answer is not JSON") from None
        if answer.status != 200:
            message = body.get("message") if isinstance(body, dict) else None
            raise ApiError(f"{url}: HTTP {answer.status}: {message or 'no message'}")
        return body

    def overview(self) -> list[dict[str, Any]]:
        """Every flow of ``/v2/replications`` with its ``topics`` (the flow's topic list) added."""
        flows: list[dict[str, Any]] = self.get("/v2/replications")["replications"]
        for flow in flows:
            try:
                flow["topics_detail"] = self.get(f"/v2/replications/{flow['source']}/{flow['target']}/topics")["topics"]
            except ApiError as e:  # e.g. a remote flow whose deployment does not answer: show the flow anyway
                flow["topics_detail"], flow["error"] = [], str(e)
        return flows
