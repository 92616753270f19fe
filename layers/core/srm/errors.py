"""The error root: every error srm raises on purpose is an :class:`SrmError`, either retriable (the event source or
the operator may simply try again) or permanent (the input or the configuration must change first). Modules raise
subclasses that carry what they are about (topic, partition, key, ``file:line``); the handlers and the CLIs map the
root to their one-line messages."""

from __future__ import annotations

__all__ = ["ConfigError", "PermanentError", "RetriableError", "SrmError"]


class SrmError(Exception):
    """Something srm detected and can say in one line."""


class RetriableError(SrmError):
    """A dependency did not answer or was busy; the same call may succeed later."""


class PermanentError(SrmError):
    """The request, the record or the configuration is wrong; retrying without a change fails the same way."""


class ConfigError(PermanentError, ValueError):
    """A configuration problem, named by key, value and where it came from."""

    def __init__(self, message: str, *, key: str | None = None, origin: str | None = None) -> None:
        where = f"{origin}: " if origin else ""
        super().__init__(f"{where}{message}")
        self.key = key
        self.origin = origin
