"""Building parametrize tables."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["by_outcome"]


def by_outcome(*, true: Iterable[str], false: Iterable[str]) -> list[tuple[str, bool]]:
    """The rows of a yes-or-no rule's table, names grouped by the answer: ``(name, True)``, then ``(name, False)``."""
    return [(name, True) for name in true] + [(name, False) for name in false]
