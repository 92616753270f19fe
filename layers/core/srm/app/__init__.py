"""The composition root: reads the environment once per container and builds what the use cases need.

Nothing else in ``srm`` reads ``os.environ`` (the variables: :mod:`srm.app.environment`). :class:`App` is the
container's clients and stores (:mod:`srm.app.base`) with every function's wiring, a module each: ``mirror``,
``checkpoint``, ``heartbeat``, ``topic_sync`` and ``metrics_api`` — each builds its function's context for this
container's flow and keeps what that function holds for the container's life.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from srm.app.checkpoint import CheckpointWiring
from srm.app.environment import Environment
from srm.app.heartbeat import HeartbeatWiring
from srm.app.metrics_api import MetricsApiWiring
from srm.app.mirror import MirrorWiring
from srm.app.topic_sync import TopicSyncWiring
from srm.aws.secrets import secrets_manager_resolver

__all__ = ["App", "Environment", "secrets_manager_resolver"]


class App(MirrorWiring, CheckpointWiring, HeartbeatWiring, TopicSyncWiring, MetricsApiWiring):
    """Per-container wiring. ``App.current()`` is what handlers use; tests build their own."""

    _current: App | None = None
    _current_lock = threading.Lock()
    _bound: ContextVar[App | None] = ContextVar("srm_app", default=None)

    @classmethod
    def current(cls) -> App:
        bound = cls._bound.get()
        if bound is not None:
            return bound
        with cls._current_lock:
            if cls._current is None:
                cls._current = cls(Environment.from_env())
            return cls._current

    @classmethod
    def reset(cls) -> None:
        """Forget the per-container app (tests; a new environment)."""
        with cls._current_lock:
            cls._current = None

    @classmethod
    @contextmanager
    def serving(cls, app: App) -> Iterator[App]:
        """``current()`` is ``app`` in this thread meanwhile: several deployments' APIs in one test process."""
        token = cls._bound.set(app)
        try:
            yield app
        finally:
            cls._bound.reset(token)
