"""Where threads are: what a call that does not return waits on (the watchdog's stall reasons and thread dumps)."""

from __future__ import annotations

import sys
import threading
import traceback
from pathlib import Path
from typing import Any

__all__ = ["innermost", "thread_dump", "waiting_in"]


def innermost(frame: Any, depth: int = 5) -> str:
    """A thread's innermost frames, innermost first."""
    stack = traceback.extract_stack(frame)[-depth:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))


def thread_dump() -> str:
    """Every thread of this process and where it is, one per line: what a call that does not return waits on may
    be another thread (a pool's)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"  {names.get(ident, ident)}: {innermost(frame)}" for ident, frame in sorted(sys._current_frames().items())
    )


def waiting_in(thread: threading.Thread) -> str:
    """Where ``thread`` is now."""
    frame = sys._current_frames().get(thread.ident or -1)
    return "(its thread has ended)" if frame is None else innermost(frame)
