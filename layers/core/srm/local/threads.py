"""Where threads are: what a call that does not return waits on (the watchdog's stall reasons and thread dumps); and
the thread by which a process of ``srm run`` stops when its supervisor is gone."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["innermost", "stop_without_supervisor", "thread_dump", "waiting_in"]

log = logging.getLogger(__name__)


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


def stop_without_supervisor(stop: threading.Event, every_s: float = 1.0, grace_s: float = 60.0) -> threading.Thread:
    """Set ``stop`` once this process's parent (``srm run``'s supervisor) is gone — killed with SIGKILL, say, which it
    cannot pass on — and end the process if it has not stopped ``grace_s`` later: an orphaned worker would go on
    replicating beside the next ``srm run``."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(every_s):
            if os.getppid() != parent:
                log.warning("srm run's supervisor (pid %d) is gone: this process stops", parent)
                stop.set()
                time.sleep(grace_s)
                os._exit(1)

    thread = threading.Thread(target=watch, name="supervisor-watch", daemon=True)
    thread.start()
    return thread
