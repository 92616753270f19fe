"""What a long-lived process (a worker, a Lambda container) has said about each subject, so that its log says a thing
once per change of state: a statement is said when it starts holding or changes; a problem that persists is said
again at most every so often, with how often it held meanwhile; a state that persists is not said again.

Invariants: for one subject, two calls with the same statement within ``again_after_s`` say it at most once; a
changed statement is always said; after :meth:`Said.ended` the next statement is said as new."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["PROBLEM_AGAIN_S", "Said"]

PROBLEM_AGAIN_S = 300.0  # a persisting problem is said again every 5 minutes: seen in a log tail, not flooding it


@dataclass
class _Told:
    statement: Hashable
    at: float
    held: int = 0  # times it held since it was last said


class Said:
    """Thread-safe: the scheduled functions of a worker run on threads of their own."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._told: dict[Hashable, _Told] = {}
        self._clock = clock
        self._lock = threading.Lock()

    def tell(self, subject: Hashable, statement: Hashable, again_after_s: float | None = PROBLEM_AGAIN_S) -> str | None:
        """None: keep quiet (said already). Otherwise say it, followed by the returned text: empty when the
        statement is new or changed; when a persisting one is said again (``again_after_s`` after it was last said;
        None: never), how many times it held meanwhile."""
        now = self._clock()
        with self._lock:
            told = self._told.get(subject)
            if told is None or told.statement != statement:
                self._told[subject] = _Told(statement, now)
                return ""
            told.held += 1
            if again_after_s is None or now - told.at < again_after_s:
                return None
            held, told.held, told.at = told.held, 0, now
            return f" (still; {held} time(s) in the last {again_after_s / 60:g} min)"

    def say(
        self, subject: Hashable, statement: Hashable, log: Callable[..., None], message: str, *args: object
    ) -> bool:
        """``log(message % args)`` (``log.warning`` …) when :meth:`tell` says to, with its text after; whether it
        was said. A problem's statement is its error text: a new error is said at once, the same one every 5 min."""
        again = self.tell(subject, statement)
        if again is None:
            return False
        log(message + "%s", *args, again)
        return True

    def ended(self, subject: Hashable) -> bool:
        """Forget what was said about ``subject``; whether anything was (then its end is worth saying)."""
        with self._lock:
            return self._told.pop(subject, None) is not None
