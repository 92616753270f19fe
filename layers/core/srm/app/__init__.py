"""The wiring of srm's functions: reads the environment once per container and builds what the use cases need.

Nothing else in ``srm`` reads ``os.environ`` (the variables: :mod:`srm.app.environment`). The container's clients and
stores are :mod:`srm.app.base`; each function's wiring is a module: ``mirror``, ``checkpoint``, ``heartbeat``,
``topic_sync`` (which advertises the metrics API, so it includes that wiring), ``verify`` and ``metrics_api`` — each
builds its function's context for this container's flow and keeps what that function holds for the container's life.
A Lambda handler imports only its function's module; :class:`App` (:mod:`srm.app.composed`), every function's wiring
on one container, is imported only where every function runs in one process, so this package imports none of them
itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["App", "Environment", "secrets_manager_resolver"]

if TYPE_CHECKING:
    from srm.app.composed import App
    from srm.app.environment import Environment
    from srm.aws.secrets import secrets_manager_resolver


def __getattr__(name: str) -> Any:
    if name == "App":
        from srm.app.composed import App

        return App
    if name == "Environment":
        from srm.app.environment import Environment

        return Environment
    if name == "secrets_manager_resolver":
        from srm.aws.secrets import secrets_manager_resolver

        return secrets_manager_resolver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
