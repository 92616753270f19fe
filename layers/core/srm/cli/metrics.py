"""``srm metrics``: the flows and topics of a running ``srm run`` (or any reachable metrics API) as a live table."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from srm.cli.tables import table
from srm.local.api_client import MetricsApiClient

__all__ = ["render", "watch"]

_FLOW_COLUMNS = ("FLOW", "STATUS", "TOPICS", "REC/S", "P50 MS", "P99 MS", "LAG", "HEARTBEAT AGE", "LAST CHECKPOINT")
_TOPIC_COLUMNS = ("TOPIC", "STATUS", "PARTITIONS", "REC/S", "P50 MS", "P99 MS", "LAG")


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.1f}s" if ms < 120_000 else f"{ms / 60_000:.0f}m"


def _clock(ms: int | None) -> str:
    return "-" if ms is None else datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S")


def render(flows: Sequence[dict[str, Any]]) -> str:
    """Flows, then each flow's topics: status, records/s, latency p50/p99, lag (over the last 5 minutes)."""
    if not flows:
        return "no flows configured"
    rows: list[tuple[str, ...]] = []
    for f in flows:
        fig = f["figures"]
        rows.append(
            (
                f"{f['source']}->{f['target']}",
                f["status"],
                str(f["topics"]),
                _number(fig["record_rate"], 1),
                _number(fig.get("latency_p50_ms")),
                _number(fig["latency_p99_ms"]),
                _number(fig["lag"]),
                _age(f["heartbeat_age_ms"]),
                _clock(f["last_checkpoint_ms"]),
            )
        )
    header: tuple[str, ...] = _FLOW_COLUMNS
    servers = [(f.get("served_by") or {}).get("name") or "-" for f in flows]
    if len(set(servers)) > 1:  # a gateway's answer: say which deployment runs each flow
        header, rows = (*header, "SERVED BY"), [(*row, server) for row, server in zip(rows, servers, strict=True)]
    lines = table(header, rows, figures_from=2)
    for f in flows:
        lines += ["", f"{f['source']}->{f['target']} topics:"]
        if f.get("error"):
            lines.append(f"  {f['error']}")
            continue
        topics = f.get("topics_detail") or []
        if not topics:
            lines.append("  none replicated yet")
            continue
        topic_rows = [
            (
                t["upstream_topic"]
                if t["upstream_topic"] == t["remote_topic"]
                else f"{t['upstream_topic']} -> {t['remote_topic']}",
                t.get("status", "-"),
                str(t["partitions"]),
                _number(t["figures"]["record_rate"], 1),
                _number(t["figures"].get("latency_p50_ms")),
                _number(t["figures"]["latency_p99_ms"]),
                _number(t["figures"]["lag"]),
            )
            for t in topics
        ]
        lines += ["  " + line for line in table(_TOPIC_COLUMNS, topic_rows, figures_from=2)]
    return "\n".join(lines)


def watch(
    client: MetricsApiClient,
    *,
    once: bool,
    as_json: bool,
    interval: float,
    out: TextIO = sys.stdout,
    stop: threading.Event | None = None,
) -> None:
    """Print the table (or one JSON document per refresh) every ``interval`` seconds until ``stop`` or Ctrl-C."""
    stop = stop or threading.Event()
    clear = out.isatty() and not as_json and not once
    while True:
        flows = client.overview()
        if as_json:
            out.write(json.dumps({"replications": flows, "at_ms": int(time.time() * 1000)}) + "\n")
        else:
            stamp = f"{client.base_url} at {datetime.now():%H:%M:%S} (figures over the last 5 minutes)"
            out.write(
                ("\x1b[H\x1b[2J" if clear else "") + stamp + "\n\n" + render(flows) + "\n" + ("" if clear else "\n")
            )
        out.flush()
        if once or stop.wait(interval):
            return
