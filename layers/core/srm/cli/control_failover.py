"""``srm-control``'s commands for moving consumers and replication between clusters: ``offsets`` (where a consumer
group resumes on the target) and ``takeover`` (where srm starts after MirrorMaker 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from srm.aws.secrets import secrets_manager_resolver
from srm.cli.control_session import PROG, Session, flow_args
from srm.cli.options import add_command, add_json, add_timeout
from srm.cli.tables import table, takeover_lines
from srm.control.check import require_clusters
from srm.control.failover import NoOffsetsError, export_csv, failover_offsets, translated_by, untranslated_notes
from srm.replication.takeover import take_over
from srm.state import StateError

__all__ = ["register_offsets", "register_takeover"]


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
