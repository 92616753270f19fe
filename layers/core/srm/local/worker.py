"""One flow's functions on one machine: what a stack per flow is on AWS, as one process.

``python -m srm.local.worker`` runs with the same environment a flow's Lambda functions get (``SRM_SOURCE``,
``SRM_TARGET``, table names, ``AWS_ENDPOINT_URL``). It runs the scheduled functions on their intervals, read
live from the config table, and keeps one emulated event source mapping per replicated topic, started and stopped
by the topic-sync function's decisions (:class:`srm.local.mappings.LocalEventSources` is its port implementation).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from srm.app import App
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.local.event_source import LocalContext
from srm.local.mappings import LocalEventSources

__all__ = ["LocalEventSources", "Scheduled", "main", "run_worker"]

log = logging.getLogger(__name__)


@dataclass
class Scheduled:
    """A scheduled function: its handler and how to read its interval from the live config (None = disabled)."""

    name: str
    handler: Callable[[dict[str, Any], Any], Any]
    interval: Callable[[SrmConfig], float | None]
    next_run: float = 0.0
    running: threading.Thread | None = None


def schedule_event(name: str) -> dict[str, Any]:
    """The EventBridge scheduled event a function receives (the shape of ``events/schedule.json``)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "version": "0",
        "id": "local",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": now,
        "region": "local",
        "resources": [f"local:rule/{name}"],
        "detail": {},
    }


def run_worker(app: App, schedule: list[Scheduled], stop: threading.Event, status_every: float = 10.0) -> None:
    """Run scheduled functions until ``stop`` is set; a failure is logged and the next tick retries."""
    source, target = app.env.flow()
    last_status = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        try:
            config = app.config()
        except Exception as e:
            log.error("%s->%s: cannot read the configuration: %s", source, target, e)
            stop.wait(2.0)
            continue
        for job in schedule:
            interval = job.interval(config)
            if interval is None or now < job.next_run or (job.running is not None and job.running.is_alive()):
                continue
            job.next_run = now + interval
            # Each function on its own thread, one invocation at a time (as a Lambda with reserved concurrency 1):
            # one blocked on an unreachable cluster holds up neither the others nor a stop.
            job.running = threading.Thread(target=_invoke, args=(job, source, target), name=job.name, daemon=True)
            job.running.start()
        if now - last_status >= status_every and app.event_sources is not None:
            last_status = now
            _log_status(source, target, app.event_sources)
        stop.wait(0.2)


def _invoke(job: Scheduled, source: str, target: str) -> None:
    try:
        job.handler(schedule_event(job.name), LocalContext(f"srm-{source}-{target}-{job.name}"))
    except Exception as e:
        log.error(
            "%s->%s %s failed (retried next interval): %s",
            source,
            target,
            job.name,
            e,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )


def _log_status(source: str, target: str, event_sources: Any) -> None:
    mappings = event_sources.mappings() if hasattr(event_sources, "mappings") else {}
    records = sum(m.stats.records for m in mappings.values())
    failing = [f"{t}: {m.stats.last_error}" for t, m in mappings.items() if m.stats.last_error]
    log.info(
        "%s->%s: %d topic(s), %d record(s) replicated%s",
        source,
        target,
        len(mappings),
        records,
        f"; failing: {'; '.join(failing)}" if failing else "",
    )


def default_schedule() -> list[Scheduled]:
    from srm.handlers import checkpoint, heartbeat, topic_sync

    def every(key: str, enabled_key: str | None = None) -> Callable[[SrmConfig], float | None]:
        def interval(config: SrmConfig) -> float | None:
            source, target = App.current().env.flow()
            settings = config.settings(source, target)
            if enabled_key and not getattr(settings, enabled_key):
                return None
            return float(getattr(settings, key))

        return interval

    return [
        Scheduled("topic-sync", topic_sync.lambda_handler, every("refresh_topics_interval_seconds")),
        Scheduled(
            "heartbeat", heartbeat.lambda_handler, every("emit_heartbeats_interval_seconds", "emit_heartbeats_enabled")
        ),
        Scheduled(
            "checkpoint",
            checkpoint.lambda_handler,
            every("emit_checkpoints_interval_seconds", "emit_checkpoints_enabled"),
        ),
    ]


def main() -> int:
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SRM_DEBUG") else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    from srm.handlers import mirror

    try:
        app = App.current()
        source, target = app.env.flow()
    except ConfigError as e:
        print(f"srm worker: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    event_sources = LocalEventSources(app, mirror.lambda_handler)
    app.event_sources = event_sources
    log.info("%s->%s: worker started", source, target)
    try:
        run_worker(app, default_schedule(), stop)
    finally:
        event_sources.stop_all()
        log.info("%s->%s: worker stopped", source, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
