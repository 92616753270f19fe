"""The metrics API's wiring: this deployment as the API presents itself, its remote querying, and topic sync's advert
of it to peers."""

from __future__ import annotations

from typing import Any

from srm.app.base import AppBase
from srm.app.environment import Environment
from srm.aws.api_client import PeerApiClient
from srm.config.settings import SrmConfig
from srm.control.metrics import Deployment
from srm.control.remote import AdvertContext, Gateway, deployment
from srm.kafka.adverts import ADVERTS_TOPIC, read_adverts

__all__ = ["MetricsApiWiring"]


class MetricsApiWiring(AppBase):
    def __init__(self, env: Environment, dynamodb: Any | None = None) -> None:
        super().__init__(env, dynamodb)
        self._gateway: Gateway | None = None

    def deployment(self, config: SrmConfig, request_url: str | None = None) -> Deployment:
        """This deployment as its metrics API advertises it (remote querying)."""
        env = self.env
        return deployment(config, env_name=env.deployment, url=env.api_url, region=env.region, request_url=request_url)

    def gateway(self) -> Gateway:
        """The metrics API's remote querying, once per container (it caches peers and owners)."""
        with self._lock:
            if self._gateway is None:
                client = PeerApiClient()
                resolver = self.kafka.resolver
                self._gateway = Gateway(lambda c, alias, t: read_adverts(c, alias, t, resolver), client.get)
            return self._gateway

    def advert_context(self) -> AdvertContext | None:
        """Topic sync's advert of this deployment's metrics API on the flow's target; None without an API URL."""
        if self.env.api_url is None:
            return None
        flow, config, settings, _ = self._bind()
        self.ensure_internal_topic(config, flow.target, ADVERTS_TOPIC, settings.checkpoints_topic_replication_factor)
        producer = self.kafka.producer(
            config, flow.target, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="adverts"
        )
        return AdvertContext(self.deployment(config), producer, min(30.0, settings.mirror_delivery_timeout_ms / 1000.0))
