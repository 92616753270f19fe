"""``srm-control``'s commands for moving consumers and replication between clusters: ``offsets`` (where a consumer
group resumes on the target), ``takeover`` (where srm starts after MirrorMaker 2) and ``replication-offsets`` (where
replication of each source partition stands, and moving it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from srm.aws.lambda_mappings import LambdaMappingSwitch
from srm.aws.secrets import secrets_manager_resolver
from srm.cli.control_session import PROG, Session, UsageError, flow_args
from srm.cli.options import add_command, add_json, add_timeout
from srm.cli.tables import move_lines, position_lines, table, takeover_lines
from srm.control.check import require_clusters
from srm.control.failover import NoOffsetsError, export_csv, failover_offsets, translated_by, untranslated_notes
from srm.control.replication_offsets import FlowPause, MoveReport, ReplicationOffsets
from srm.core.replication_offsets import SKIPPED_REASON, MoveTo, parse_datetime
from srm.replication.takeover import take_over
from srm.state import StateError

__all__ = ["register_offsets", "register_replication_offsets", "register_takeover"]


def register_offsets(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "offsets", _offsets, parents=[common])
    flow_args(p)
    p.add_argument("--group", required=True, help="the consumer group")
    p.add_argument("--export", action="store_true", help="print topic,partition,offset lines (CSV)")
    p.add_argument("--output", type=Path, help="with --export: write the CSV to this file")
    add_timeout(p, 30.0)


def _offsets(session: Session, args: argparse.Namespace) -> int:
    """where a consumer group resumes on the target (failover), from the checkpoints there

    Reads <source>.checkpoints.internal on the target, as MM2's RemoteClusterUtils does, so it works while the source
    is down. --export prints the CSV that `kafka-consumer-groups --reset-offsets --from-file` takes. Exit status 1 when
    there is nothing to fail over with (the message says why). A partition whose newest committed offset got no
    checkpoint (it cannot be translated exactly) is named on stderr, with why.
    """
    config = session.store().load(fresh=True)
    state = session.state()
    try:
        offsets = failover_offsets(
            config,
            args.source,
            args.target,
            args.group,
            secrets_manager_resolver(session.region),
            timeout=args.timeout,
            state=state,
        )
    except NoOffsetsError as e:
        print(f"{PROG}: {e}", file=session.err)
        return 1
    try:
        notes = untranslated_notes(state, args.source, args.target, args.group)
    except StateError as e:
        notes = [f"cannot read why offsets got no checkpoint: {e}"]
    for note in notes:
        session.warn(note)
    if args.export:
        if args.output:
            args.output.write_text(export_csv(offsets))
            session.print(
                f"wrote {len(offsets)} offsets of {args.group} to {args.output}; apply with:",
                f"  kafka-consumer-groups --bootstrap-server <{args.target}> --group {args.group} "
                f"--reset-offsets --from-file {args.output} --execute",
            )
        else:
            session.out.write(export_csv(offsets))
        return 0
    try:
        by = translated_by(state, args.source, args.target, args.group, offsets)
    except StateError as e:
        session.warn(f"cannot tell srm's checkpoints from MirrorMaker 2's: {e}")
        by = {}
    rows = [
        [c.topic, str(c.partition), str(c.offset), str(c.upstream_offset), by.get((c.topic, c.partition), "?")]
        for c in offsets
    ]
    session.print(*table(["TOPIC", "PARTITION", "OFFSET", f"OFFSET ON {args.source}", "TRANSLATED BY"], rows))
    return 0


def register_takeover(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "takeover", _takeover, parents=[common])
    flow_args(p)
    p.add_argument("--dry-run", action="store_true", help="print where each partition would start; write nothing")
    add_json(p)
    add_timeout(p, 30.0)


def _takeover(session: Session, args: argparse.Namespace) -> int:
    """start a flow where MirrorMaker 2 stopped (after MM2 is stopped, before srm replicates)

    Per partition of the topics the flow replicates: where srm starts and where that was read. A partition srm never
    replicated starts at MirrorMaker 2's committed position (its offsets topic mm2-offsets.<source>.internal on the
    target), else after its newest offset sync, else at the log start; the position is committed to the partition's
    event source mapping group on the source. `srm run` and topic sync do the same by themselves before they create a
    mapping; run this to see it first (--dry-run), or before deploying. TAIL counts the copies MM2 made past its
    recorded position: srm writes them again.
    """
    config = session.store().load(fresh=True)
    flow = config.check_flow(args.source, args.target)
    resolver = secrets_manager_resolver(session.region)
    require_clusters(config, list(flow), resolver, args.timeout)
    report = take_over(config, flow, resolver, dry_run=args.dry_run, timeout=args.timeout)
    if args.json:
        session.print_json(report.to_dict())
    else:
        session.print(*takeover_lines(report))
    return 0


def register_replication_offsets(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "replication-offsets", _replication_offsets, parents=[common])
    flow_args(p)
    p.add_argument("--topic", help="only this source topic")
    p.add_argument("--partition", type=int, metavar="P", help="with --topic: only this partition")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="move to the log start (replicate it all again)")
    to.add_argument("--to-latest", action="store_true", help="move to the log end (skip what is not replicated yet)")
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="move to the first record at or after this time (UTC unless a zone is given)",
    )
    to.add_argument("--to-offset", type=int, metavar="N", help="move to offset N (the next record replicated)")
    p.add_argument("--dry-run", action="store_true", help="print where each partition would move; move nothing")
    p.add_argument(
        "--force-stop",
        action="store_true",
        help="while the flow replicates: disable it, wait until its mappings stop, move, enable it again",
    )
    add_json(p)
    add_timeout(p, 30.0)


def _replication_offsets(session: Session, args: argparse.Namespace) -> int:
    """where replication of each source partition stands; --to-… moves it (while the flow is stopped)

    A partition's position is the committed offset of its event source mapping's consumer group on the source
    (srm-mirror.<source>-<target>.<topic>): the next record replicated. A partition with none starts where the
    source consumer's auto.offset.reset says (earliest by default). --to-earliest, --to-latest, --to-datetime and
    --to-offset move positions, only while the flow's mappings are stopped (srm-control flows disable), or with
    --force-stop, which stops the flow for the move and starts it again. Moving forward skips records: they are
    never replicated, and a consumer group whose committed offset lies among them gets no checkpoint there
    (srm-control offsets says why). Moving backward replicates records again: duplicates on the target, by design.
    """
    targets = [args.to_earliest, args.to_latest, args.to_datetime is not None, args.to_offset is not None]
    if args.partition is not None and args.topic is None:
        raise UsageError("replication-offsets: --partition needs --topic")
    if (args.dry_run or args.force_stop) and not any(targets):
        raise UsageError(
            "replication-offsets: --dry-run and --force-stop go with --to-earliest, --to-latest, "
            "--to-datetime or --to-offset"
        )
    if args.to_offset is not None and args.to_offset < 0:
        raise UsageError(f"replication-offsets: --to-offset {args.to_offset} is not an offset (0 or more)")
    moving = any(targets)
    to = _move_to(args) if moving else None  # bad input is refused before anything is asked
    config = session.store().load(fresh=True)
    resolver = secrets_manager_resolver(session.region)
    config.check_flow(args.source, args.target)
    require_clusters(config, [args.source], resolver, args.timeout)
    offsets = ReplicationOffsets.for_flow(
        config, args.source, args.target, resolver, session.state() if moving else None, timeout=args.timeout
    )
    if not moving:
        positions = offsets.positions(args.topic, args.partition)
        if args.json:
            session.print_json(
                {
                    "flow": str(offsets.flow),
                    "startFrom": offsets.start_from,
                    "partitions": [
                        {
                            "topic": p.topic,
                            "partition": p.partition,
                            "position": p.committed,
                            "logStart": p.log_start,
                            "logEnd": p.log_end,
                        }
                        for p in positions
                    ],
                }
            )
        else:
            session.print(*position_lines(offsets.flow, positions, offsets.start_from))
        return 0
    assert to is not None
    moves = offsets.plan(to, args.topic, args.partition)
    paused = False
    if not args.dry_run:
        pause = _pause(session, offsets) if args.force_stop else None
        hint = f"stop it first (srm-control flows disable '{offsets.flow}'), or give --force-stop"
        paused = offsets.apply(moves, reason=SKIPPED_REASON, pause=pause, running_hint=hint)
    report = MoveReport(offsets.flow, str(to), moves, args.dry_run, paused)
    if args.json:
        session.print_json(report.to_dict())
    else:
        session.print(*move_lines(report))
    return 0


def _move_to(args: argparse.Namespace) -> MoveTo:
    if args.to_earliest:
        return MoveTo("earliest")
    if args.to_latest:
        return MoveTo("latest")
    if args.to_offset is not None:
        return MoveTo("offset", offset=args.to_offset)
    try:
        return MoveTo("datetime", timestamp_ms=parse_datetime(args.to_datetime))
    except ValueError:
        raise UsageError(
            f"replication-offsets: --to-datetime {args.to_datetime!r} is not an ISO 8601 date-time "
            "(e.g. 2025-01-20T09:00:00Z)"
        ) from None


def _pause(session: Session, offsets: ReplicationOffsets) -> FlowPause:
    """--force-stop: the flow disabled; on AWS its event source mappings switched off at once too."""
    pause = FlowPause(session.control(), offsets.flow)
    if not session.in_kafka:
        mappings = session.state().event_source_mappings(*offsets.flow)
        pause.mappings = LambdaMappingSwitch(session.lambda_client())
        pause.mapping_ids = [m.id for m in mappings.values() if m.enabled]
    return pause
