"""``srm-control verify``: prove a flow's copy, record by record (:mod:`srm.control.verify`).

Exit status: 0 everything verified is identical; 1 something differs (or a cluster does not answer); 2 bad input.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any, TextIO

from srm.aws.secrets import secrets_manager_resolver
from srm.cli.control_session import Session, UsageError, flow_args
from srm.cli.options import add_command, add_json, add_timeout
from srm.config.connectors import load_config
from srm.config.settings import SrmConfig
from srm.control.check import require_clusters
from srm.control.verify import FlowVerification, Progress, Throttle, Verifier, VerifyOptions, check_flow
from srm.core.replication_offsets import parse_datetime
from srm.core.verification import Finding, PartitionReport
from srm.state import StateStore

__all__ = ["register_verify"]

PROGRESS_AFTER_S = 2.0  # a run shorter than this shows no progress bar


def register_verify(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "verify", _verify, parents=[common])
    flow_args(p)
    p.add_argument("--topic", metavar="REGEX", help="only the source topics this regex matches in full")
    p.add_argument("--partition", type=int, metavar="N", help="only partition N")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--since", metavar="ISO", help="from the first source record at or after this time (UTC)")
    start.add_argument("--from-offset", type=int, metavar="N", help="from source offset N")
    p.add_argument("--sample", type=float, metavar="FRACTION", help="check this fraction of each range (0 < F <= 1)")
    p.add_argument("--max-rate", type=float, metavar="RECORDS_PER_S", help="read at most this many records a second")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the clusters and flow from this file (srm YAML or mm2.properties), without srm's state: a copy "
        "MirrorMaker 2 or another replicator made",
    )
    add_json(p)
    add_timeout(p, 30.0)


def _verify(session: Session, args: argparse.Namespace) -> int:
    """compare a flow's source and target record by record: exit 0 identical, 1 different

    Each replicated partition's source range already replicated is compared with the target range it maps to: key,
    value, headers (srm's own provenance header aside), timestamp and order, after the flow's transform chain. Pairs
    records through srm's offset runs, or (a copy MirrorMaker 2 made: --config mm2.properties) through MM2's offset
    syncs and the records' content. Reports per partition what is missing, extra, different, the duplicates, and what
    is legitimately absent (offset gaps, recorded data loss, transforms, dead letters), with a digest of the range.
    The next run continues where the last identical one stopped (--from-offset 0 starts over).
    """
    options = _options(args)
    config, state = _config_and_state(session, args)
    resolver = secrets_manager_resolver(session.region)
    check_flow(config, args.source, args.target)  # bad input is refused before a cluster is asked
    require_clusters(config, [args.source, args.target], resolver, args.timeout)
    progress = Progress(report=_ProgressBar(session.err) if _interactive(session.err) else None)
    verifier = Verifier.for_flow(
        config,
        args.source,
        args.target,
        resolver,
        state,
        timeout=args.timeout,
        throttle=Throttle(options.max_rate),
        progress=progress,
    )
    try:
        result = verifier.run(options)
    finally:
        verifier.close()
        if progress.report is not None:
            session.err.write("\n")
    if args.json:
        session.print_json(result.to_dict())
    else:
        session.print(*report_lines(result))
    return 0 if result.identical else 1


def _options(args: argparse.Namespace) -> VerifyOptions:
    """The options, checked before anything is asked (bad input: one line, exit 2)."""
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"verify: --partition {args.partition} is not a partition (0 or more)")
    if args.from_offset is not None and args.from_offset < 0:
        raise UsageError(f"verify: --from-offset {args.from_offset} is not an offset (0 or more)")
    if args.sample is not None and not 0 < args.sample <= 1:
        raise UsageError(f"verify: --sample {args.sample:g} is not a fraction (greater than 0, at most 1)")
    if args.max_rate is not None and (not args.max_rate > 0 or math.isinf(args.max_rate)):
        raise UsageError(f"verify: --max-rate {args.max_rate:g} is not a rate (records a second, more than 0)")
    since = None
    if args.since is not None:
        try:
            since = parse_datetime(args.since)
        except ValueError:
            raise UsageError(f"verify: --since {args.since!r} is not an ISO 8601 date-time") from None
    return VerifyOptions(args.topic, args.partition, args.from_offset, since, args.sample, args.max_rate)


def _config_and_state(session: Session, args: argparse.Namespace) -> tuple[SrmConfig, StateStore | None]:
    if args.config:
        if session.in_kafka or args.endpoint_url:
            raise UsageError("verify: --config reads no srm state: it excludes --local, --state-of and --endpoint-url")
        try:
            return load_config(Path(args.config)), None
        except OSError as e:
            raise UsageError(f"verify: --config {args.config}: {e.strerror or e}") from None
    config = session.store().load(fresh=True)
    return config, session.state()


# -- output ----------------------------------------------------------------------------------------------------------
def report_lines(result: FlowVerification) -> list[str]:
    lines: list[str] = []
    for r in result.reports:
        lines += _partition_lines(r)
    lines.append(result.verdict())
    return lines


def _partition_lines(r: PartitionReport) -> list[str]:
    (s0, s1), (d0, d1) = r.source_range, r.target_range
    state = "identical" if r.identical else "DIFFERENT"
    sample = f", sample {r.sampled:g}" if r.sampled else ""
    lines = [
        f"{r.topic}-{r.partition} -> {r.remote_topic}-{r.partition} ({r.method}{sample}): {state}; source offsets "
        f"{_span(s0, s1)}, target offsets {_span(d0, d1)}; {r.compared} compared, {r.missing.count} missing, "
        f"{r.extra.count} extra, {r.different.count} different, {r.duplicates.count} duplicates; digest {r.digest[:16]}"
    ]
    for name, finding, side in (
        ("missing", r.missing, "source"),
        ("extra", r.extra, "target"),
        ("different", r.different, "target"),
        ("duplicate", r.duplicates, "target"),
    ):
        lines += _finding_lines(name, finding, side)
    absent = {k: v for k, v in r.absences.to_dict().items() if v}
    if absent:
        lines.append("  legitimately absent: " + ", ".join(f"{_words(k)} {v}" for k, v in absent.items()))
    for lost in r.lost_ranges:
        start, end = lost[0], lost[1]
        if len(lost) == 3:
            lines.append(f"  skipped on purpose: source offsets {start}..{end - 1} ({lost[2]})")  # type: ignore[misc]
        else:
            lines.append(f"  recorded data loss: source offsets {start}..{end - 1} purged before they were replicated")
    lines += [f"  {note}" for note in (*r.resets, *r.notes)]
    return lines


def _finding_lines(name: str, finding: Finding, side: str) -> list[str]:
    lines = []
    for offset, note in finding.first:
        lines.append(f"  {name}: {side} offset {offset}{': ' + note if note else ''}")
    if finding.count > len(finding.first):
        lines.append(f"  … and {finding.count - len(finding.first)} more {name}")
    return lines


def _span(start: int, end: int) -> str:
    return f"{start}..{end - 1}" if end > start else "none"


def _words(key: str) -> str:
    return "".join(" " + c.lower() if c.isupper() else c for c in key)


def _interactive(err: TextIO) -> bool:
    return bool(getattr(err, "isatty", lambda: False)())


class _ProgressBar:
    """One line on stderr, redrawn at most a few times a second, once the run has lasted a moment."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.shown = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if now - p.started < PROGRESS_AFTER_S or now - self.shown < 0.25:
            return
        self.shown = now
        share = p.done_records / p.total_records if p.total_records else 1.0
        bar = "#" * int(min(1.0, share) * 30)
        eta = p.eta_s
        self.err.write(
            f"\r[{bar:<30}] {p.done_records}/{p.total_records} records, {p.done_partitions}/{p.total_partitions} "
            f"partitions, {p.rate:,.0f} records/s, ETA {'-' if eta is None else f'{eta:.0f}s'}  "
        )
        self.err.flush()
