"""``srm-control``: SRM's operator tool, over the DynamoDB config table every function reads.

    srm-control [--local | --endpoint-url URL] [--region R] [--config-table T] [--state-table T] COMMAND …

Exit status: 0 done; 1 the store or a cluster does not answer, or someone else changed the configuration meanwhile
(nothing written); 2 bad input: usage, an invalid regex, an unknown alias or flow, a malformed file (nothing written).
Errors are one line on stderr starting with ``srm-control:``.

Adding a command is one ``register_<name>(subparsers, common)`` function that adds its parser (``parents=[common]``
gives it the connection options; :func:`srm.cli.options.add_command` documents it with its handler's docstring) and
sets ``handler`` to ``fn(session, args) -> exit status``, plus one entry in :data:`COMMANDS`. The commands that edit
the configuration are in :mod:`srm.cli.control_edits`, those for failing over in :mod:`srm.cli.control_failover`;
``status`` is here.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TextIO

from srm.aws.secrets import secrets_manager_resolver
from srm.cli.control_edits import register_config, register_filters, register_flows
from srm.cli.control_failover import register_offsets, register_replication_offsets, register_takeover
from srm.cli.control_session import PROG, Handler, Parser, Register, Session, UsageError, common_options, flow_args
from srm.cli.control_verify import register_verify
from srm.cli.options import add_command, add_json, add_timeout
from srm.cli.tables import age, flow_nodes, node_lines, table
from srm.config.store import ConfigConflictError, ConfigStoreError
from srm.control.edits import ControlError
from srm.control.nodes import nodes_status
from srm.control.status import FlowStatus, member_stalls
from srm.errors import ConfigError, PermanentError, SrmError
from srm.flow import Flow
from srm.kafka.readers import KafkaStatusProbe
from srm.state import StateError, StateStore

__all__ = ["COMMANDS", "Session", "UsageError", "build_parser", "main"]


def register_status(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, "status", _status, parents=[common])
    flow_args(p, required=False)
    p.add_argument("--topics", action="store_true", help="also list each flow's topics with their lag")
    add_json(p)
    add_timeout(p, 10.0)


def _status(session: Session, args: argparse.Namespace) -> int:
    """flows, replicated topics, lag, last heartbeat and checkpoint

    Per flow: enabled or not, the topics its filters select on the source now, their lag (source records not yet
    committed by each topic's event source mapping), and the newest heartbeat and checkpoint that reached the target.
    Asks the clusters; one that does not answer is reported, not fatal.
    """
    if bool(args.source) != bool(args.target):
        raise UsageError("status: give both --source and --target, or neither")
    flows = [Flow(args.source, args.target)] if args.source else None
    probe = KafkaStatusProbe(secrets_manager_resolver(session.region), timeout=args.timeout)
    try:
        control = session.control()
        base = control.snapshot()
        state: StateStore | None = session.state()
        members = session.nodes(control.config(base).nodes().group_id)
    except StateError as e:  # the flows' status is shown without what only the state knows
        if not args.local:
            raise
        # this directory's srm run: its config file, and what its own workers noted beside it
        session.warn(f"the state cannot be read: {e}; showing this node's own view")
        control, members = session.local_view()
        base, state = control.snapshot(), None
    statuses = control.status(probe, state, flows, base=base)
    nodes = nodes_status(members, [Flow(s.source, s.target) for s in statuses])
    if state is None:  # what the nodes' watchdogs find stuck, as their member items hold it
        statuses = [replace(s, stalled=member_stalls(members, s.source, s.target)) for s in statuses]
    if args.json:
        session.print_json([{**s.to_dict(), **flow_nodes(nodes, s.name)} for s in statuses])
        return 0
    now = time.time() * 1000
    rows = [
        [
            s.name,
            "yes" if s.enabled else "no",
            "?" if s.topics is None else str(len(s.topics)),
            "?" if s.lag is None else str(s.lag),
            age(s.oldest_unreplicated_ms, now),
            age(s.last_heartbeat_ms, now),
            "-" if s.heartbeat_latency_ms is None else f"{s.heartbeat_latency_ms} ms",
            age(s.last_checkpoint_ms, now),
        ]
        for s in statuses
    ]
    headers = [
        "FLOW",
        "ENABLED",
        "TOPICS",
        "LAG",
        "OLDEST UNREPLICATED",
        "LAST HEARTBEAT",
        "LATENCY",
        "LAST CHECKPOINT",
    ]
    session.print(*table(headers, rows))
    for s in statuses:
        session.print(*_problem_lines(s, now))
    if nodes.nodes:
        session.print("", *node_lines(nodes, now))
    if args.topics:
        for s in statuses:
            where = "as of its last topic sync" if s.topics_from == "state" else "selected on the source now"
            session.print("", f"{s.name} topics ({where}):")
            session.print(*_topic_lines(s))
    return 0


def _problem_lines(s: FlowStatus, now: float) -> list[str]:
    """What is wrong with a flow: stalls, data lost or reset on the source, event source mappings, errors."""
    lines = []
    for stall in s.stalled:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stall.since_ms / 1000))
        lines.append(f"{s.name}: {stall.what} stalled since {since} ({age(stall.since_ms, now)}): {stall.reason}")
    for loss in s.losses:
        if not loss.purged:
            lines.append(
                f"{s.name}: SKIPPED {loss.topic}-{loss.partition} offsets {loss.start}..{loss.end - 1} "
                f"({loss.end - loss.start} offsets) never replicated: {loss.reason} ({age(loss.at_ms, now)})"
            )
            continue
        lines.append(
            f"{s.name}: DATA LOSS {loss.topic}-{loss.partition} offsets {loss.start}..{loss.end - 1} "
            f"({loss.end - loss.start} offsets) purged on the source before they were replicated "
            f"(detected {age(loss.at_ms, now)})"
        )
    for reset in s.resets:
        lines.append(
            f"{s.name}: TOPIC RESET {reset.topic}-{reset.partition} started over ({reset.reason}; detected "
            f"{age(reset.at_ms, now)}): its old incarnation's offset runs are archived"
        )
    for m in s.mapping_problems:
        lines.append(
            f"{s.name}: MAPPING PROBLEM {m.topic} (event source mapping {m.id}, reported since "
            f"{age(m.updated_at_ms, now)}): {m.problem}"
        )
    lines += [f"{s.name}: {error}" for error in s.errors]
    if s.verification_differences:
        lines.append(
            f"{s.name}: VERIFICATION found {s.verification_differences} differences between source and target "
            f"(srm-control verify --source {s.source} --target {s.target} names them)"
        )
    if s.verified:  # how far srm-control verify has proven the copy identical
        through = ", ".join(f"{t}-{p} below {o}" for t, p, o in s.verified)
        lines.append(f"{s.name}: verified identical: {through}")
    return lines


def _topic_lines(status: FlowStatus) -> list[str]:
    if status.topics is None:
        return ["  (source not reachable)"]
    if not status.topics:
        return ["  (no topic selected)"]
    now = time.time() * 1000
    rows = [
        [t.topic, t.remote, str(t.partitions), "?" if t.lag is None else str(t.lag), age(t.oldest_unreplicated_ms, now)]
        for t in status.topics
    ]
    return ["  " + line for line in table(["TOPIC", "REMOTE TOPIC", "PARTITIONS", "LAG", "OLDEST UNREPLICATED"], rows)]


COMMANDS: list[Register] = [
    register_filters("topics"),
    register_filters("groups"),
    register_flows,
    register_config,
    register_status,
    register_offsets,
    register_takeover,
    register_replication_offsets,
    register_verify,
]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Change what serverless-srm replicates while it runs, and see how it is doing. The "
        "configuration lives in the DynamoDB config table every function reads (through a short cache), or, for srm "
        "run, beside its state in Kafka (--local, --state-of).",
        epilog="exit status: 0 done; 1 the store or a cluster does not answer, or the configuration changed meanwhile "
        "(nothing written); 2 bad input (nothing written)",
    )
    common_options(parser, defaults=True)
    common = Parser(add_help=False)
    common_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for register in COMMANDS:
        register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args: argparse.Namespace | None = None
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s", stream=err)
    for noisy in ("botocore", "boto3", "urllib3", "aws_lambda_powertools"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        args = build_parser().parse_args(argv)
        session = Session(args, out, err)
        handler: Handler = args.handler
        try:
            return handler(session, args)
        finally:
            session.close()
    except (UsageError, ControlError, ConfigError) as e:
        print(f"{PROG}: {e}", file=err)
        return 2
    except ConfigStoreError as e:
        print(f"{PROG}: {e}{_tables_hint(e, args)}", file=err)
        return 1
    except ConfigConflictError as e:
        print(f"{PROG}: {e}", file=err)
        return 1
    except SrmError as e:  # every other error srm raises on purpose says what is wrong in one line
        print(f"{PROG}: {e}", file=err)
        return 2 if isinstance(e, PermanentError) else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `srm-control config export | head`
        return 0
    except Exception as e:  # one line, never a traceback (SRM_DEBUG=1 shows it)
        if os.environ.get("SRM_DEBUG"):
            raise
        print(f"{PROG}: unexpected {type(e).__name__}: {e} (SRM_DEBUG=1 shows the traceback)", file=err)
        return 1


def _tables_hint(error: ConfigStoreError, args: argparse.Namespace | None) -> str:
    if not error.missing_table or args is None or args.local or args.state_of:
        return ""
    try:
        tables = Session(args, sys.stdout, sys.stderr).dynamodb().list_tables().get("TableNames", [])
    except Exception:  # only a hint; the error itself is already clear
        return ""
    there = ", ".join(tables) if tables else "none"
    return f" (tables there: {there}; --config-table names another, config import --create-tables creates it)"


if __name__ == "__main__":
    sys.exit(main())
