"""GET requests to other deployments' metrics APIs (remote querying): SigV4-signed (service ``execute-api``, the
caller's credentials) when the URL is an API Gateway endpoint, whose IAM authorization asks for it; plain HTTP
otherwise, as ``srm run`` serves its API on the loopback.

urllib3 (botocore's own HTTP client, so no new dependency in the Lambda runtime) sends them; botocore's
:class:`SigV4Auth` signs them, as the AWS docs show for calling an IAM-authorized API.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import botocore.session
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from srm.errors import RetriableError

__all__ = ["ApiAnswer", "PeerApiClient", "PeerUnreachableError", "sigv4_headers"]

# https://{api id}.execute-api.{region}.amazonaws.com[.cn]/{stage}
_EXECUTE_API = re.compile(r"^[a-z0-9]+\.execute-api\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class PeerUnreachableError(RetriableError, ConnectionError):
    """The peer did not answer (refused, timed out, not resolvable)."""


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    body: bytes
    content_type: str


def sigv4_headers(
    url: str, headers: Mapping[str, str], credentials: Any, region: str, method: str = "GET"
) -> dict[str, str]:
    """``headers`` plus the SigV4 ones (Authorization, X-Amz-Date, X-Amz-Security-Token) for ``url``."""
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    SigV4Auth(credentials, "execute-api", region).add_auth(request)
    return dict(request.headers.items())


class PeerApiClient:
    """One per container: a connection pool shared by the threads that fan out."""

    def __init__(self, connect_timeout_s: float = 2.0, read_timeout_s: float = 8.0) -> None:
        self._pool = urllib3.PoolManager(
            num_pools=32, maxsize=4, timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        )
        self._session = botocore.session.get_session()

    def get(self, url: str, headers: Mapping[str, str]) -> ApiAnswer:
        send = dict(headers)
        aws = _EXECUTE_API.match(urlsplit(url).hostname or "")
        if aws is not None:
            credentials = self._session.get_credentials()
            if credentials is None:
                raise PeerUnreachableError(f"{url}: no AWS credentials to sign the request (SigV4) with")
            send = sigv4_headers(url, send, credentials.get_frozen_credentials(), aws["region"])
        try:
            response = self._pool.request("GET", url, headers=send, retries=False, redirect=False)
        except urllib3.exceptions.HTTPError as e:
            raise PeerUnreachableError(f"{urlsplit(url).netloc}: {_reason(e)}") from None
        return ApiAnswer(response.status, response.data, response.headers.get("Content-Type", ""))


def _reason(e: Exception) -> str:
    """urllib3's message, without the pool and object reprs it wraps around the cause."""
    cause = getattr(e, "reason", None) or e
    text = str(cause)
    m = re.search(r"\[Errno -?\d+\] ([^')\"]+)", text)
    if m:
        return m.group(1).strip()
    if isinstance(cause, urllib3.exceptions.TimeoutError) or "timed out" in text:
        return "timed out"
    return text.split(": ", 1)[-1]
