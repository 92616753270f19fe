"""Two clusters as srm-control's status sees them, for the status and watchdog tests: their config (a->b replicating
``p.*``, b->a disabled) and a probe where cluster a answers and cluster b does not."""

from __future__ import annotations

from collections.abc import Mapping

from srm.config.settings import SrmConfig
from srm.core.plans import TopicInfo
from srm.kafka.admin import KafkaUnavailableError

__all__ = ["PROPS", "FakeProbe"]

PROPS = {
    "clusters": "a, b",
    "a.bootstrap.servers": "a:9092",
    "b.bootstrap.servers": "b:9092",
    "a->b.enabled": "true",
    "a->b.topics": r"p\..*",
    "b->a.enabled": "false",
}


class FakeProbe:
    """Cluster a answers; cluster b does not."""

    def topics(self, config: SrmConfig, alias: str) -> Mapping[str, TopicInfo]:
        if alias == "b":
            raise KafkaUnavailableError("cannot list topics: timed out")
        names = {"p.one": 2, "p.two": 1, "heartbeats": 1, "p.internal": 1, "__consumer_offsets": 50, "other": 1}
        return {n: TopicInfo(n, p) for n, p in names.items()}

    def lag(self, config: SrmConfig, source: str, target: str, topics: Mapping[str, int]) -> dict[str, int | None]:
        assert set(topics) <= {"p.one", "p.two"}  # selected data topics only
        return {"p.one": 5, "p.two": 0}

    def oldest_unreplicated(self, config: SrmConfig, source: str, target: str) -> dict[str, int]:
        return {"p.one": 1_700_000_000_000}

    def last_heartbeat(self, config: SrmConfig, source: str, target: str) -> int | None:
        return 1_700_000_000_000 if source == "a" else None

    def last_checkpoint(self, config: SrmConfig, source: str, target: str) -> int | None:
        return None
