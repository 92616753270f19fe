"""The loop guard of name-preserving replication (``IdentityReplicationPolicy``), at three levels.

With the default policy a remote topic's name records its path (``b.a.orders``), so ``is_cycle`` keeps a topic
from ever going back to a cluster it came through. A policy that keeps names cannot, so:

1. **Configuration** (:func:`identity_loops`, checked when a configuration is loaded): a topic named *literally*
   (no regex metacharacters) in a flow's ``topics`` that a cycle of enabled name-preserving flows would all
   replicate (``a->b`` and ``b->a`` both selecting ``orders``, or ``a->b->c->a``) is refused, naming the topic and
   the cycle. Regexes cannot be compared in general; they are guarded by the next two levels.
2. **Topics** (:func:`came_from`, at topic-sync time): a source topic that replication created (the state table's
   topic mappings record it) is a replica, not an origin; a flow never replicates it back to a cluster it came
   from, however many hops away. Topics that existed on both clusters before replication started (active-active
   aggregation) are origins on both sides and are replicated both ways; level 3 keeps their records from looping.
3. **Records** (the provenance header): when the remote topic keeps the source topic's name, the mirror adds the
   source alias to the record's ``srm-provenance`` header (comma-separated aliases the record has visited, e.g.
   ``a,b``), and skips — counts as processed, never writes — a record whose provenance already names the target.
   A record therefore never re-enters a cluster it has visited. The default policy adds no header: its records
   stay byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from srm.core.filters import ReplicateDecision
from srm.mm2.policy import ReplicationPolicy

__all__ = [
    "PROVENANCE_HEADER",
    "IdentityLoop",
    "came_from",
    "identity_loops",
    "keeps_name",
    "literal_name",
    "mirror_skips",
    "provenance",
    "stamp_provenance",
]

PROVENANCE_HEADER = "srm-provenance"
Header = tuple[str, bytes | None]
_META = frozenset(".^$*+?{}[]|()")


def keeps_name(policy: ReplicationPolicy, source: str, topic: str) -> bool:
    """True when the policy gives the remote topic the source topic's own name (no provenance in the name)."""
    return policy.format_remote_topic(source, topic) == topic


# -- 1. configuration ---------------------------------------------------------------------------------------------
def literal_name(pattern: str) -> str | None:
    """The one topic name a pattern matches when it is a plain name (``orders``, ``orders\\.v1``), else None."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 < len(pattern) and not pattern[i + 1].isalnum():
                out.append(pattern[i + 1])
                i += 2
                continue
            return None  # \d, \w, \b…: a class, not a character
        if ch in _META:
            return None
        out.append(ch)
        i += 1
    return "".join(out) or None


@dataclass(frozen=True)
class IdentityLoop:
    topic: str
    cycle: tuple[str, ...]  # aliases, first == last: ("a", "b", "a")

    def __str__(self) -> str:
        return f"topic {self.topic!r} would loop {' -> '.join(self.cycle)}"


def identity_loops(flows: Mapping[tuple[str, str], ReplicateDecision]) -> list[IdentityLoop]:
    """Cycles of enabled flows that would all replicate a literally named topic under its own name (each flow by
    its own replicate decision)."""
    names = sorted(
        {n for d in flows.values() for p in d.topic_filter.include.patterns if (n := literal_name(p)) is not None}
    )
    loops: list[IdentityLoop] = []
    for name in names:
        edges: dict[str, list[str]] = {}
        for (source, target), replicate in sorted(flows.items()):
            if keeps_name(replicate.policy, source, name) and replicate(name):
                edges.setdefault(source, []).append(target)
        cycle = _find_cycle(edges)
        if cycle is not None:
            loops.append(IdentityLoop(name, cycle))
    return loops


def _find_cycle(edges: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    path: list[str] = []

    def visit(node: str) -> tuple[str, ...] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                return (*path[path.index(nxt) :], nxt)
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


# -- 2. topics ----------------------------------------------------------------------------------------------------
Origins = Mapping[tuple[str, str], Iterable[tuple[str, str]]]


def came_from(topic: str, cluster: str, target: str, origins: Origins) -> bool:
    """True when ``topic`` on ``cluster`` was created by replication from ``target``, over any number of hops.

    ``origins`` maps ``(cluster, topic)`` to the ``(source cluster, source topic)`` pairs whose replication created
    that topic there (from the state table's topic mappings)."""
    seen: set[tuple[str, str]] = set()
    pending = [(cluster, topic)]
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        for upstream_cluster, upstream_topic in origins.get(node, ()):
            if upstream_cluster == target:
                return True
            pending.append((upstream_cluster, upstream_topic))
    return False


# -- 3. records ---------------------------------------------------------------------------------------------------
def provenance(headers: Sequence[Header] | None) -> list[str]:
    """The aliases a record has visited, from its first ``srm-provenance`` header."""
    for name, value in headers or ():
        if name == PROVENANCE_HEADER:
            return [a for a in (value or b"").decode("utf-8", "replace").split(",") if a]
    return []


def stamp_provenance(headers: Sequence[Header] | None, source: str, target: str) -> list[Header] | None:
    """The record's headers with ``source`` added to its provenance, or None when it has visited ``target`` already
    (skip it). Other headers keep their order and duplicates; the provenance header keeps its place."""
    out = list(headers or ())
    for i, (name, value) in enumerate(out):
        if name == PROVENANCE_HEADER:
            visited = [a for a in (value or b"").decode("utf-8", "replace").split(",") if a]
            if target in visited:
                return None
            if source not in visited:
                visited.append(source)
            out[i] = (PROVENANCE_HEADER, ",".join(visited).encode("utf-8"))
            return out
    out.append((PROVENANCE_HEADER, source.encode("utf-8")))
    return out


def mirror_skips(source: str, target: str, policy: ReplicationPolicy) -> Callable[[str, Any], bool]:
    """Whether the mirror of ``source->target`` leaves a record of ``topic`` with these headers out: only where the
    remote topic keeps the name, for records that visited ``target`` (see :func:`stamp_provenance`)."""

    def skips(topic: str, headers: Any) -> bool:
        return policy.format_remote_topic(source, topic) == topic and stamp_provenance(headers, source, target) is None

    return skips
