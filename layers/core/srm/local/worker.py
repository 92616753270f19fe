"""One flow's functions on one machine: what a stack per flow is on AWS, as one process.

``python -m srm.local.worker`` runs with the same environment a flow's Lambda functions get (``SRM_SOURCE``,
``SRM_TARGET``, table names, ``AWS_ENDPOINT_URL``), and its node's id (``SRM_NODE_ID``). It keeps one emulated
event source mapping per replicated topic, as the state's mapping records say (written by the topic-sync function's
decisions: :class:`srm.local.mappings.LocalEventSources`), each a member of the topic's group beside the other
nodes' workers; and, while it is the flow's elected leader (:mod:`srm.local.leadership`), runs the scheduled
functions on their intervals, read live from the config table. It records what it holds (the state's member item,
:mod:`srm.aws.nodes`). A :class:`Watchdog` reports what is stuck longer than ``SRM_STALL_SECONDS`` (default 30) and
rebuilds stuck mappings' consumers. A fenced worker (another node took its node id) stops with status 75.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srm.app import App
from srm.config.nodes import member_id
from srm.config.settings import SrmConfig
from srm.core.said import Said
from srm.errors import ConfigError
from srm.kafka.admin import ensure_topic
from srm.kafka.clients import consumer_config
from srm.local.context import LocalContext
from srm.local.event_source import EmulatedMapping
from srm.local.leadership import Leadership, leader_group, nodes_topic
from srm.local.mappings import LocalEventSources
from srm.local.nodes import NodeFiles, Noted
from srm.local.threads import stop_without_supervisor, thread_dump
from srm.state import StateError, stalls_fact
from srm.state.nodes import MemberRecord, Nodes

__all__ = ["FENCED_EXIT", "LocalEventSources", "Scheduled", "Stall", "Watchdog", "main", "run_worker"]

log = logging.getLogger(__name__)

FENCED_EXIT = 75  # the status a fenced worker exits with (the supervisor stops the node)
_FOLLOW_S = 1.0  # how often the mappings are matched with the state's records
_MEMBER_S = 2.0  # how often the member item is written
_said = Said()  # what the worker's log said last: a failure that persists, the status line


@dataclass
class Scheduled:
    """A scheduled function: its handler and how to read its interval from the live config (None = disabled)."""

    name: str
    handler: Callable[[dict[str, Any], Any], Any]
    interval: Callable[[SrmConfig], float | None]
    next_run: float = 0.0
    running: threading.Thread | None = None
    failures: int = 0  # runs failed in a row
    failing_since_ms: int | None = None  # when the first of them started
    last_error: str | None = None


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


@dataclass(frozen=True)
class Stall:
    since_ms: int
    reason: str


class Watchdog:
    """Finds what has been stuck for longer than ``bound_s``: a mapping with a partition of its topic not assigned
    to it, or with no progress (see :meth:`EmulatedMapping.stall`), and a scheduled function whose runs keep
    failing. A stall is logged when it starts and ends, recorded in the flow status (fact ``stalled``: JSON, what →
    since and why, read by ``srm-control status``), and a stuck mapping's consumer is rebuilt, again every
    ``bound_s`` while it stays stuck — unless a batch is being retried, which is then the reason shown."""

    def __init__(self, app: App, bound_s: float = 30.0, node_id: str = "") -> None:
        self.app = app
        self.bound_s = bound_s
        self.fact = f"stalled@{node_id}" if node_id else "stalled"  # each node records its own
        self.stalls: dict[str, Stall] = {}
        self._rebuilt_at: dict[str, float] = {}
        self._holders: dict[str, str] = {}  # who holds the partitions a mapping misses, found when its stall began
        self._recorded: str | None = None  # the ``stalled`` fact as last written

    def check(self, mappings: Mapping[str, EmulatedMapping], schedule: list[Scheduled]) -> dict[str, Stall]:
        source, target = self.app.env.flow()
        now, wall_ms = time.monotonic(), int(time.time() * 1000)
        found: dict[str, Stall] = {}
        stuck: dict[str, EmulatedMapping] = {}
        for topic, mapping in mappings.items():
            stall = mapping.stall(self.bound_s, now)
            if stall is None:
                continue
            since, reason = stall
            what = f"topic {topic}"
            if reason.startswith("no partition") or reason.startswith("partition"):
                if what not in self._holders:
                    self._holders[what] = self._other_members(mapping)
                reason += self._holders[what]
            old = self.stalls.get(what)
            found[what] = Stall(old.since_ms if old else wall_ms - int((now - since) * 1000), reason)
            stuck[what] = mapping
        for job in schedule:
            if job.failures >= 2 and job.failing_since_ms and wall_ms - job.failing_since_ms > self.bound_s * 1000:
                found[f"function {job.name}"] = Stall(job.failing_since_ms, f"every run fails: {job.last_error}")
        for what, new in found.items():
            if what not in self.stalls:
                log.warning("%s->%s: %s stalled since %s: %s", source, target, what, _clock(new.since_ms), new.reason)
                if what in stuck:  # where a call that does not return waits may be another thread (a pool's)
                    log.warning("%s->%s: the worker's threads:\n%s", source, target, thread_dump())
        for what, mapping in stuck.items():
            if now - self._rebuilt_at.get(what, -self.bound_s) >= self.bound_s and mapping.rebuild():
                self._rebuilt_at[what] = now
                log.info("%s->%s: %s: its consumer is rebuilt", source, target, what)
        for what, old_stall in self.stalls.items():
            if what not in found:
                seconds = (wall_ms - old_stall.since_ms) / 1000
                log.warning("%s->%s: %s recovered after %.0fs", source, target, what, seconds)
                self._rebuilt_at.pop(what, None)
                self._holders.pop(what, None)
        self.stalls = found
        self._record(source, target)
        return found

    def _other_members(self, mapping: EmulatedMapping) -> str:
        """Members of the mapping's group other than its own consumer (who else holds its partitions), or ''."""
        flow = self.app.env.flow()
        try:
            admin = self.app.kafka.admin(self.app.config(), flow.source, flow)
            group = admin.describe_consumer_groups([mapping.group_id], request_timeout=5)[mapping.group_id].result()
        except Exception:  # only a detail of the report
            return ""
        others = [
            f"{m.client_id}@{m.host.lstrip('/')} (member {m.member_id})"
            for m in group.members
            if m.group_instance_id != mapping.instance_id
        ]
        if not others:
            return ""
        return f"; held by {len(others)} other member(s) until they leave or the broker expires them: " + ", ".join(
            others
        )

    def stalled_fact(self) -> str:
        """The stalls as the flow status's ``stalled`` fact records them (also kept in the node's member item, which
        ``srm-control status`` reads when the state's cluster does not answer)."""
        return stalls_fact({what: (s.since_ms, s.reason) for what, s in self.stalls.items()})

    def _record(self, source: str, target: str) -> None:
        fact = self.stalled_fact()
        if fact == self._recorded:
            return
        try:
            self.app.state.update_flow_status(source, target, **{self.fact: fact})
        except StateError as e:
            log.warning("%s->%s: stalls not recorded in the flow status (retried): %s", source, target, e)
            return
        self._recorded = fact


def _clock(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def run_worker(
    app: App,
    schedule: list[Scheduled],
    stop: threading.Event,
    status_every: float = 10.0,
    watchdog: Watchdog | None = None,
    leadership: Leadership | None = None,
    members: Nodes | None = None,
) -> None:
    """Run scheduled functions until ``stop`` is set (only while leading, with a ``leadership``); a failure is
    logged and the next tick retries. The watchdog, if any, looks every second. With ``members``, the mappings
    follow the state's records and this node's member item is written."""
    source, target = app.env.flow()
    last_status = time.monotonic()
    last_check = last_follow = last_member = 0.0
    local = app.event_sources if isinstance(app.event_sources, LocalEventSources) else None
    while not stop.is_set():
        now = time.monotonic()
        if local is not None and now - last_follow >= _FOLLOW_S:
            last_follow = now
            try:
                local.follow(app.state.event_source_mappings(source, target))
            except Exception as e:  # the store does not answer: the running mappings go on
                message = "%s->%s: cannot read the event source mappings (retried): %s"
                _said.say((source, target, "follow"), str(e), log.warning, message, source, target, e)
            else:
                if _said.ended((source, target, "follow")):
                    log.info("%s->%s: the event source mappings are read again", source, target)
            fenced = next((m.fenced for m in local.mappings().values() if m.fenced), None)
            if fenced is not None:
                _report_member(members, local, leadership, source, target, fenced_by=fenced, watchdog=watchdog)
                raise SystemExit(FENCED_EXIT)
        if members is not None and local is not None and now - last_member >= _MEMBER_S:
            last_member = now
            _report_member(members, local, leadership, source, target, watchdog=watchdog)
        try:
            config = app.config()
        except Exception as e:
            _said.say(
                (source, target, "config"),
                str(e),
                log.error,
                "%s->%s: cannot read the configuration: %s",
                source,
                target,
                e,
            )
            stop.wait(2.0)
            continue
        if _said.ended((source, target, "config")):
            log.info("%s->%s: the configuration is read again", source, target)
        with leadership.guard if leadership is not None else contextlib.nullcontext():
            leading = leadership is None or leadership.is_leader
            for job in schedule if leading else ():
                interval = job.interval(config)
                if interval is None or now < job.next_run or (job.running is not None and job.running.is_alive()):
                    continue
                job.next_run = now + interval
                # Each function on its own thread, one invocation at a time (as a Lambda with reserved concurrency
                # 1): one blocked on an unreachable cluster holds up neither the others nor a stop.
                job.running = threading.Thread(target=_invoke, args=(job, source, target), name=job.name, daemon=True)
                job.running.start()
        mappings = app.event_sources.mappings() if isinstance(app.event_sources, LocalEventSources) else {}
        if watchdog is not None and now - last_check >= 1.0:
            last_check = now
            try:
                watchdog.check(mappings, schedule)
            except Exception as e:  # the watchdog must not stop the worker it watches
                log.error("%s->%s: watchdog check failed: %s", source, target, e)
        if now - last_status >= status_every and app.event_sources is not None:
            last_status = now
            _log_status(source, target, mappings, watchdog.stalls if watchdog is not None else {})
        stop.wait(0.2)


def _report_member(
    members: Nodes | None,
    local: LocalEventSources,
    leadership: Leadership | None,
    source: str,
    target: str,
    fenced_by: str = "",
    watchdog: Watchdog | None = None,
) -> None:
    if members is None:
        return
    mappings = local.mappings()
    record = MemberRecord(
        node_id=local.member_id,
        source=source,
        target=target,
        leader=leadership is None or leadership.is_leader,
        partitions={t: m.assigned for t, m in mappings.items() if m.assigned},
        last_rebalance_ms=max([m.last_rebalance_ms for m in mappings.values()] + [0]),
        seen_ms=int(time.time() * 1000),
        fenced_by=fenced_by,
        stalled=watchdog.stalled_fact() if watchdog is not None and watchdog.stalls else "",
    )
    try:
        members.put_member(record)
    except StateError as e:
        log.warning("%s->%s: member item not written (retried): %s", source, target, e)


def _invoke(job: Scheduled, source: str, target: str) -> None:
    started_ms = int(time.time() * 1000)
    try:
        job.handler(schedule_event(job.name), LocalContext(f"srm-{source}-{target}-{job.name}"))
    except Exception as e:
        job.failures += 1
        job.failing_since_ms = job.failing_since_ms or started_ms
        job.last_error = (str(e).splitlines() or [type(e).__name__])[0]
        # said when it starts failing or fails otherwise; a run failing as the last one did, now and then
        again = _said.tell((source, target, "failing", job.name), job.last_error)
        (log.error if again is not None else log.debug)(
            "%s->%s %s failed (retried next interval): %s%s",
            source,
            target,
            job.name,
            e,
            again or "",
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
    else:
        if job.failures:
            _said.ended((source, target, "failing", job.name))
            log.info("%s->%s %s succeeds again after %d failed run(s)", source, target, job.name, job.failures)
        job.failures, job.failing_since_ms, job.last_error = 0, None, None


def _log_status(source: str, target: str, mappings: Mapping[str, EmulatedMapping], stalls: Mapping[str, Stall]) -> None:
    records = sum(m.stats.records for m in mappings.values())
    failing = [f"{t}: {m.stats.last_error}" for t, m in mappings.items() if m.stats.last_error]
    stalled = [f"{what} since {_clock(s.since_ms)}" for what, s in sorted(stalls.items())]
    status = (
        f"{len(mappings)} topic(s), {records} record(s) replicated"
        + (f"; failing: {'; '.join(failing)}" if failing else "")
        + (f"; stalled: {', '.join(stalled)}" if stalled else "")
    )
    # progress is said as it goes; an idle flow's unchanged line is not said again
    said = _said.tell((source, target, "status"), status, again_after_s=None) is not None
    (log.info if said else log.debug)("%s->%s: %s", source, target, status)


def default_schedule() -> list[Scheduled]:
    from srm.handlers import checkpoint, heartbeat, topic_sync, verify

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
        Scheduled("verify", verify.lambda_handler, _verify_interval),
    ]


def _verify_interval(config: SrmConfig) -> float | None:
    """``verify.interval.seconds``; 0 (the default): continuous verification is off."""
    source, target = App.current().env.flow()
    return config.settings(source, target).verify_interval_seconds or None


def main() -> int:
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SRM_DEBUG") else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)  # "Found credentials …", "Found endpoint …" at every start
    from srm.handlers import mirror

    try:
        app = App.current()
        source, target = app.env.flow()
        stall_s = float(os.environ.get("SRM_STALL_SECONDS", "30"))
        node_id = member_id(
            os.environ.get("SRM_NODE_ID") or f"{os.uname().nodename}-{os.getpid()}",
            int(os.environ.get("SRM_WORKER_INDEX", "0")),
        )
        config = app.config()
        nodes = config.nodes()
    except ConfigError as e:
        print(f"srm worker: {e}", file=sys.stderr)
        return 2
    except ValueError:
        print("srm worker: SRM_STALL_SECONDS and SRM_WORKER_INDEX must be numbers", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop_without_supervisor(stop)
    app.hand_over_metrics_per_call = False  # this process keeps running: its metrics sender sends meanwhile
    event_sources = LocalEventSources(app, mirror.lambda_handler, node_id, nodes.session_timeout_ms)
    app.event_sources = event_sources
    schedule = default_schedule()
    leadership = _leadership(app, config, source, target, schedule, nodes.group_id, nodes.session_timeout_ms)
    members: Nodes = app.nodes(config)
    if app.env.local_state_dir:  # what srm-control --local status shows while the shared state cannot be read
        members = Noted(members, NodeFiles(Path(app.env.local_state_dir) / "nodes", nodes.group_id))
    log.info("%s->%s: worker started (node %s)", source, target, node_id)
    try:
        leadership.start()
        run_worker(
            app, schedule, stop, watchdog=Watchdog(app, stall_s, node_id), leadership=leadership, members=members
        )
    except SystemExit as e:
        if e.code == FENCED_EXIT:
            log.error(
                "%s->%s: node %s was fenced: another node took over its id; this worker stops", source, target, node_id
            )
        raise
    finally:
        event_sources.stop_all()
        leadership.stop()
        app.metrics.close()
        log.info("%s->%s: worker stopped", source, target)
    return 0


def _leadership(
    app: App,
    config: SrmConfig,
    source: str,
    target: str,
    schedule: list[Scheduled],
    group_id: str,
    session_timeout_ms: int,
) -> Leadership:
    """The flow's leader election (see :mod:`srm.local.leadership`): where the state is (the store cluster, its
    topic), else on the flow's target."""
    flow = config.check_flow(source, target)
    alias = app.env.store_cluster or target
    topic = config.nodes().topic if app.env.store_cluster else nodes_topic(group_id)
    settings = config.settings(source, target)

    def ensure() -> None:  # the state's topic exists already; the target's is created here
        if not app.env.store_cluster:
            admin = app.kafka.admin(config, alias, flow)
            ensure_topic(admin, topic, 1, settings.checkpoints_topic_replication_factor, {"cleanup.policy": "compact"})

    def elected() -> None:
        for attempt in range(3):
            try:
                app.state.claim_leadership(source, target)  # an earlier leader's writes fail from now on
                break
            except StateError as e:  # until claimed, the leader's writes fail (and are retried)
                log.warning(
                    "%s->%s: the leadership's state not claimed (attempt %d): %s", source, target, attempt + 1, e
                )
        for job in schedule:
            job.next_run = 0.0  # a new leader runs every function at once

    def deposed() -> None:
        # The next leader starts once this one's functions ended; a worker that stops waits less: a function
        # blocked on a cluster that does not answer writes nothing, and ends with the process.
        bound = 2.0 if leadership.stopping else 60.0
        for job in schedule:
            if job.running is not None:
                job.running.join(bound)
        with contextlib.suppress(StateError):  # not released: the next leader fences this process
            app.state.release_leadership(source, target)

    leadership = Leadership(
        consumer_config(config, alias, flow, group_id="srm-leader", resolver=app.kafka.resolver),
        topic,
        leader_group(group_id, source, target),
        session_timeout_ms=session_timeout_ms,
        name=f"{source}->{target}",
        on_elected=elected,
        on_deposed=deposed,
        ensure_topic=ensure,
    )
    return leadership


if __name__ == "__main__":
    sys.exit(main())
