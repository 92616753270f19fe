"""The composition root of a process that runs every function: ``srm run``'s workers and the tests. On Lambda a
container runs one function, whose handler imports only that function's wiring (:mod:`srm.app`)."""

from __future__ import annotations

from srm.app.base import AppBase
from srm.app.checkpoint import CheckpointWiring
from srm.app.heartbeat import HeartbeatWiring
from srm.app.metrics_api import MetricsApiWiring
from srm.app.mirror import MirrorWiring
from srm.app.topic_sync import TopicSyncWiring
from srm.app.verify import VerifyWiring

__all__ = ["App"]


class App(MirrorWiring, CheckpointWiring, HeartbeatWiring, TopicSyncWiring, VerifyWiring, MetricsApiWiring):
    """Every function's wiring on one container. ``App.current()`` is what the local runtime uses; tests build their
    own."""


AppBase.composed = App  # from now on, every wiring's current() is this process's one App
