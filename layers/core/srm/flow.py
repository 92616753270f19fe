"""A replication flow, ``source->target``: one value with one spelling (MM2's ``SourceAndTarget``)."""

from __future__ import annotations

from typing import NamedTuple

from srm.errors import ConfigError

__all__ = ["Flow"]


class Flow(NamedTuple):
    """``str()`` gives ``a->b``; :meth:`parse` reads it back. A tuple, so it unpacks as ``source, target``."""

    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.source}->{self.target}"

    @classmethod
    def parse(cls, name: str) -> Flow:
        source, sep, target = name.partition("->")
        if not sep or not source or not target:
            raise ConfigError(f"{name!r} is not a replication name: expected SOURCE->TARGET")
        return cls(source.strip(), target.strip())
