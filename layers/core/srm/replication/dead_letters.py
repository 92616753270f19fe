"""Where dead letters go in ``srm run`` (a directory), and how the mirror finds them: the records of a batch larger
than the remote topic's ``max.message.bytes`` (:mod:`srm.core.dead_letters`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from srm.core.dead_letters import DeadLetter, DeadLetterError, record_batch_size
from srm.core.events import PartitionBatch

__all__ = ["DirectoryDeadLetters", "MessageSizeLimits", "NoDeadLetters", "oversized"]


class DirectoryDeadLetters:
    """One file per letter under ``root`` (``srm run``: ``.srm-local/dead-letters``), written whole or not at all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def write(self, letters: Sequence[DeadLetter]) -> None:
        now_ms = int(time.time() * 1000)
        for letter in letters:
            path = self.root / letter.name
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_bytes(letter.to_json(now_ms))
                os.replace(tmp, path)  # a redelivered batch rewrites the same file
            except OSError as e:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                raise DeadLetterError(f"dead letter {path} not written: {e.strerror or e}") from None


class NoDeadLetters:
    """No destination configured: a record that would be dead-lettered fails its batch instead (never dropped)."""

    location = "(none)"

    def write(self, letters: Sequence[DeadLetter]) -> None:
        if letters:
            raise DeadLetterError(
                "errors.tolerance=all but this deployment has no dead-letter destination "
                "(SRM_DEAD_LETTER_BUCKET on AWS, SRM_DEAD_LETTER_DIR locally); the batch is retried"
            )


class MessageSizeLimits:
    """The remote topics' ``max.message.bytes``, looked up on the target and kept for ``ttl_s`` (topic sync may
    change it); :meth:`forget` after the target refused a record as too large."""

    def __init__(self, lookup: Callable[[str], int], ttl_s: float = 60.0) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, topic: str) -> int:
        now = time.monotonic()
        with self._lock:
            found = self._known.get(topic)
        if found is not None and now - found[1] < self._ttl_s:
            return found[0]
        limit = self._lookup(topic)
        with self._lock:
            self._known[topic] = (limit, now)
        return limit

    def forget(self, topic: str) -> None:
        with self._lock:
            self._known.pop(topic, None)


def oversized(batch: PartitionBatch, limit: int) -> list[tuple[int, int]]:
    """``(index, size)`` of the batch's records that alone exceed ``limit`` bytes, in offset order."""
    found = []
    for i, (key, value, headers) in enumerate(zip(batch.keys, batch.values, batch.headers, strict=True)):
        # Cheap bound first: a record whose key and value fit with room for the overhead cannot be too large.
        if (len(key) if key else 0) + (len(value) if value else 0) + 128 < limit and not headers:
            continue
        size = record_batch_size(key, value, headers)
        if size > limit:
            found.append((i, size))
    return found
