"""The stores of an `srm run` started in a workdir, read from Kafka as `srm-control --local` reads them: its state
topic on the cluster its node found it on, reached with its config file's settings."""

from __future__ import annotations

from pathlib import Path

from srm.config.connectors import load_config
from srm.config.settings import SrmConfig
from srm.kafka.config_store import KafkaConfig
from srm.kafka.metrics_store import KafkaMetrics, metrics_store_topic
from srm.kafka.nodes import KafkaNodes
from srm.kafka.state import KafkaState
from srm.local.store import known_store_cluster

_OPENED: list[KafkaState | KafkaMetrics] = []
_STATES: dict[Path, KafkaState] = {}  # one reader per workdir in a test (it follows the log)


def close_states() -> None:
    """Stop the state readers a test opened (tests/conftest.py calls it after each test)."""
    _STATES.clear()
    while _OPENED:
        _OPENED.pop().stop()


def _run_of(workdir: Path) -> tuple[SrmConfig, str]:
    state_dir = workdir / ".srm-local"
    config = load_config(Path((state_dir / "config.path").read_text().strip()))
    alias = known_store_cluster(config.nodes().group_id, state_dir)
    assert alias is not None, f"no store cluster noted in {state_dir}"
    return config, alias


def state_store(workdir: Path) -> KafkaState:
    if workdir not in _STATES:
        config, alias = _run_of(workdir)
        state = KafkaState.on_cluster(config, alias, config.nodes().topic).start()
        _OPENED.append(state)
        _STATES[workdir] = state
    return _STATES[workdir]


def config_store(workdir: Path) -> KafkaConfig:
    return KafkaConfig(state_store(workdir), cache_seconds=0)


def nodes_store(workdir: Path) -> KafkaNodes:
    state = state_store(workdir)
    config, _ = _run_of(workdir)
    return KafkaNodes(state, config.nodes().group_id)


def metrics_store(workdir: Path) -> KafkaMetrics:
    config, alias = _run_of(workdir)
    store = KafkaMetrics.on_cluster(config, alias, metrics_store_topic(config.nodes().group_id)).start()
    _OPENED.append(store)
    return store
