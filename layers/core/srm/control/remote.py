"""Remote querying (SRM's): one deployment's metrics API answers for the others.

Every deployment advertises its API — name, base URL, region — in a compacted topic on the clusters its flows
target (:func:`advertise`, run by each flow's topic sync). A gateway (``metrics.api.gateway.enabled``) reads those
adverts from every cluster of its configuration, adds the peers ``metrics.api.peers`` names, and:

- merges its own ``/v2/replications`` with every peer's, each flow naming the deployment that serves it, each peer
  reported with how it answered (a peer that does not answer in time is reported, not fatal);
- answers the other routes for flows it does not run by asking the peer that does, and returning its status and
  body as they are.

A request a gateway sends carries :data:`FORWARDED_HEADER`: it is answered from the receiver's own tables only, so two
gateways that know each other never ask each other in circles.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, urlencode

from pydantic import ValidationError

from srm.aws.api_client import ApiAnswer, PeerUnreachableError
from srm.config.settings import SrmConfig
from srm.control.metrics import Deployment, PeerStatus, Replications
from srm.errors import RetriableError, SrmError
from srm.kafka.adverts import ApiAdvert, write_advert

__all__ = [
    "FORWARDED_HEADER",
    "AdvertContext",
    "Gateway",
    "PeerAnswer",
    "PeerUnavailableError",
    "advertise",
    "deployment",
]

log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Srm-Forwarded-By"
DISCOVERY_TIMEOUT_S = 3.0  # per cluster, read in parallel
DISCOVERY_CACHE_S = 10.0  # adverts change when a deployment starts or moves: a few seconds stale is fine
OWNERS_CACHE_S = 10.0  # which peer serves a flow, for the routes that ask one
ADVERT_HORIZON_MS = 24 * 3_600_000  # a deployment that has not advertised for a day is forgotten

Directory = Callable[[SrmConfig, str, float], list[ApiAdvert]]  # (config, cluster alias, timeout) → adverts there
Fetch = Callable[[str, Mapping[str, str]], ApiAnswer]  # (url, headers) → answer; raises PeerUnreachableError


class PeerAnswer(SrmError):
    """A peer's answer to a forwarded request, to be returned as it is (status and body)."""

    def __init__(self, answer: ApiAnswer, peer: Deployment) -> None:
        super().__init__(f"{peer.name} answered {answer.status}")
        self.answer = answer
        self.peer = peer


class PeerUnavailableError(RetriableError):
    """The flow is not run here and the peer that serves it (or might) did not answer (HTTP 502)."""


def deployment(
    config: SrmConfig, *, env_name: str | None, url: str | None, region: str, request_url: str | None = None
) -> Deployment:
    """This deployment: named by ``metrics.api.deployment.name``, else by its environment (``srm run``: host and
    working directory; on AWS: the region); its URL from the environment, else the one the request came to."""
    name = config.metrics_api_deployment_name() or env_name or region
    return Deployment(name=name, url=(url or request_url or None), region=region)


# ---------------------------------------------------------------------------------------------------------------
# Advertising (topic sync)
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class AdvertContext:
    me: Deployment
    producer: Any  # a confluent_kafka Producer to the flow's target cluster
    timeout_s: float = 10.0


def advertise(ctx: AdvertContext, now_ms: int | None = None) -> ApiAdvert:
    """Write (refresh) this deployment's advert; the compacted topic keeps the newest per name."""
    assert ctx.me.url is not None
    advert = ApiAdvert(
        ctx.me.name, ctx.me.url, ctx.me.region or "", int(time.time() * 1000) if now_ms is None else now_ms
    )
    write_advert(ctx.producer, advert, ctx.timeout_s)
    return advert


# ---------------------------------------------------------------------------------------------------------------
# The gateway
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Peer:
    url: str
    name: str | None  # None until it answers, for a peer named by URL only
    region: str | None
    found_via: Literal["kafka", "config"]


@dataclass
class _Answer:
    status: PeerStatus
    replications: Replications | None = None
    served_by: Deployment | None = None


class Gateway:
    """One per container: it caches the adverts and which peer serves which flow for a few seconds."""

    def __init__(self, directory: Directory, fetch: Fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self._directory = directory
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._discovered: tuple[float, tuple[str, ...], list[ApiAdvert], list[str]] | None = None
        self._owners: tuple[float, dict[tuple[str, str], Deployment], list[PeerStatus]] | None = None

    # -- peers ------------------------------------------------------------------------------------------------
    def peers(self, config: SrmConfig, me: Deployment) -> tuple[list[_Peer], list[str]]:
        """The peers to ask (never this deployment itself) and the clusters whose adverts could not be read."""
        found: dict[str, _Peer] = {}
        for url in config.metrics_api_peers():
            found.setdefault(url, _Peer(url, None, None, "config"))
        errors: list[str] = []
        if config.metrics_api_gateway():
            adverts, errors = self._adverts(config)
            for advert in sorted(adverts, key=lambda a: a.name):
                url = advert.url.rstrip("/")
                known = found.get(url)
                found[url] = _Peer(url, advert.name, advert.region or None, known.found_via if known else "kafka")
        own = _endpoint(me.url or "")
        peers = [p for p in found.values() if _endpoint(p.url) != own and p.name != me.name]
        return peers, errors

    def _adverts(self, config: SrmConfig) -> tuple[list[ApiAdvert], list[str]]:
        aliases = tuple(sorted(config.clusters))
        now = self._clock()
        with self._lock:
            cached = self._discovered
            if cached is not None and cached[1] == aliases and now - cached[0] < DISCOVERY_CACHE_S:
                return cached[2], cached[3]

        def read(alias: str) -> list[ApiAdvert] | str:
            try:
                return self._directory(config, alias, DISCOVERY_TIMEOUT_S)
            except SrmError as e:  # AdvertError, or a ConfigError of that cluster's client settings
                return str(e)

        with ThreadPoolExecutor(max_workers=min(8, len(aliases)) or 1, thread_name_prefix="discover") as pool:
            results = list(pool.map(read, aliases))
        newest: dict[str, ApiAdvert] = {}
        errors: list[str] = []
        horizon = int(time.time() * 1000) - ADVERT_HORIZON_MS
        for result in results:
            if isinstance(result, str):
                errors.append(result)
                continue
            for advert in result:
                seen = newest.get(advert.name)
                if advert.advertised_ms >= horizon and (seen is None or advert.advertised_ms > seen.advertised_ms):
                    newest[advert.name] = advert
        for error in errors:
            log.warning("metrics API peers: %s", error)
        adverts = list(newest.values())
        with self._lock:
            self._discovered = (now, aliases, adverts, errors)
        return adverts, errors

    # -- /v2/replications --------------------------------------------------------------------------------------
    def replications(self, config: SrmConfig, me: Deployment, local: Replications, forwarded: bool) -> Replications:
        """This deployment's flows, and unless the request was forwarded by a gateway, every peer's."""
        own = [flow.model_copy(update={"served_by": me}) for flow in local.replications]
        if forwarded:
            return Replications(replications=own, served_by=me)
        peers, errors = self.peers(config, me)
        answers = self._ask_all(peers, me)
        merged = list(own)
        owners: dict[tuple[str, str], Deployment] = {}
        for answer in answers:
            if answer.replications is None or answer.served_by is None:
                continue
            for flow in answer.replications.replications:
                flow = flow.model_copy(update={"served_by": flow.served_by or answer.served_by})
                merged.append(flow)
                owners.setdefault((flow.source, flow.target), flow.served_by or answer.served_by)
        statuses = [a.status for a in answers]
        with self._lock:
            self._owners = (self._clock(), owners, statuses)
        return Replications(replications=merged, served_by=me, peers=statuses, discovery_errors=errors)

    def _ask_all(self, peers: Sequence[_Peer], me: Deployment) -> list[_Answer]:
        if not peers:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(peers)), thread_name_prefix="peers") as pool:
            answers = list(pool.map(lambda p: self._ask_replications(p, me), peers))
        # a peer that turns out to be this deployment under another address is not a peer
        return [a for a in answers if a.served_by is None or a.served_by.name != me.name]

    def _ask_replications(self, peer: _Peer, me: Deployment) -> _Answer:
        status = PeerStatus(
            name=peer.name or peer.url, url=peer.url, region=peer.region, found_via=peer.found_via, status="ok"
        )
        try:
            answer = self._fetch(
                f"{peer.url}/v2/replications", {FORWARDED_HEADER: me.name, "Accept": "application/json"}
            )
        except PeerUnreachableError as e:
            return _Answer(status.model_copy(update={"status": "unreachable", "error": str(e)}))
        status = status.model_copy(update={"http_status": answer.status})
        if answer.status != 200:
            return _Answer(status.model_copy(update={"status": "error", "error": _message(answer)}))
        try:
            replications = Replications.model_validate_json(answer.body)
        except ValidationError:
            error = f"not a metrics API answer: {answer.body[:80]!r}"
            return _Answer(status.model_copy(update={"status": "error", "error": error}))
        served_by = replications.served_by or Deployment(name=peer.name or peer.url, url=peer.url, region=peer.region)
        served_by = served_by.model_copy(update={"url": served_by.url or peer.url})
        status = status.model_copy(
            update={
                "name": served_by.name,
                "region": served_by.region or peer.region,
                "flows": len(replications.replications),
            }
        )
        return _Answer(status, replications, served_by)

    # -- the other routes --------------------------------------------------------------------------------------
    def ask_owner(
        self, config: SrmConfig, me: Deployment, source: str, target: str, path: str, query: Mapping[str, list[str]]
    ) -> None:
        """For a flow this deployment does not run: raise :class:`PeerAnswer` with the answer of the peer that
        does, or :class:`PeerUnavailableError` when it (or a peer that might) does not answer. Returns when every
        peer answered and none runs it: the caller's own answer (404) stands."""
        owner, statuses = self._owner(config, me, source, target)
        if owner is None:
            down = [f"{s.name} ({s.error})" for s in statuses if s.status != "ok"]
            if down:
                raise PeerUnavailableError(
                    f"{source}->{target} is not run here and no peer that answered runs it; "
                    f"not answering: {', '.join(down)}"
                )
            return
        assert owner.url is not None
        url = owner.url.rstrip("/") + quote(path)
        if query:
            url += "?" + urlencode({k: v for k, v in query.items()}, doseq=True)
        try:
            answer = self._fetch(url, {FORWARDED_HEADER: me.name, "Accept": "application/json"})
        except PeerUnreachableError as e:
            raise PeerUnavailableError(
                f"{source}->{target} is served by {owner.name}, which did not answer: {e}"
            ) from None
        raise PeerAnswer(answer, owner)

    def _owner(
        self, config: SrmConfig, me: Deployment, source: str, target: str
    ) -> tuple[Deployment | None, list[PeerStatus]]:
        with self._lock:
            cached = self._owners
        if cached is None or self._clock() - cached[0] >= OWNERS_CACHE_S or (source, target) not in cached[1]:
            self.replications(config, me, Replications(replications=[]), forwarded=False)
            with self._lock:
                cached = self._owners
        assert cached is not None
        return cached[1].get((source, target)), cached[2]


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    """A URL as the server it reaches: loopback names are one host, default ports explicit (asking this very
    server as a peer would only wait for itself: it answers one request at a time, as Lambda does)."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    host = (parts.hostname or "").lower()
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, "loopback" if host in _LOOPBACK else host, port, parts.path


def _message(answer: ApiAnswer) -> str:
    """A peer's error message: its JSON ``message``, else the start of its body."""
    try:
        doc = json.loads(answer.body)
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            return f"HTTP {answer.status}: {doc['message']}"
    except ValueError:
        pass
    return f"HTTP {answer.status}: {answer.body[:80].decode(errors='replace')}"
