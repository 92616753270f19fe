"""``srm-control``: SRM's operator tool, over the DynamoDB config table every function reads.

    srm-control [--local | --endpoint-url URL] [--region R] [--config-table T] [--state-table T] COMMAND …

Exit status: 0 done; 1 the store cannot be reached, or someone else changed the configuration meanwhile (nothing
written); 2 bad input: usage, an invalid regex, an unknown alias or flow, a malformed file (nothing written).
Errors are one line on stderr starting with ``srm-control:``.

Adding a command is one ``register_<name>(subparsers, common)`` function that adds its parser (``parents=[common]``
gives it the connection options) and sets ``handler`` to ``fn(session, args) -> exit status``, plus one entry in
:data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO

import boto3
from botocore.config import Config

from srm.app import secrets_manager_resolver
from srm.aws.config_table import ConfigConflictError, ConfigStore, ConfigStoreError, create_config_table
from srm.aws.nodes import Nodes
from srm.aws.state import StateError, StateStore, create_state_table
from srm.cli.tables import age, flow_nodes, node_lines, table, takeover_lines
from srm.config.settings import load_file
from srm.control.edits import Control, ControlError, FilterEdit, FilterKind, FilterView, FlowInfo, PatternSetting
from srm.control.failover import NoOffsetsError, export_csv, failover_offsets, translated_by, untranslated_notes
from srm.control.nodes import nodes_status
from srm.control.status import FlowStatus
from srm.core.filters import parse_list
from srm.errors import ConfigError, PermanentError, SrmError
from srm.flow import Flow
from srm.kafka.readers import KafkaStatusProbe
from srm.local.store import STATE_DIR, local_store_url
from srm.replication.takeover import take_over

__all__ = ["COMMANDS", "Session", "UsageError", "build_parser", "main"]

PROG = "srm-control"
LOCAL_REGION = "us-east-1"  # the region `srm run` gives its store and workers


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with errors as one line (raised, so main() prints them like every other error)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


# ---------------------------------------------------------------------------------------------------------------
# The session: connection options → clients, built on first use
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Session:
    args: argparse.Namespace
    out: TextIO
    err: TextIO
    _dynamodb: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str | None:
        if self.args.local:
            if self.args.endpoint_url:
                raise UsageError("--local and --endpoint-url exclude each other")
            url = local_store_url(Path.cwd() / STATE_DIR)
            if url is None:
                raise ConfigStoreError(
                    f"no local runtime is running in {Path.cwd()} ({STATE_DIR}/store.url not found): start "
                    "`srm run --config FILE` in this directory, or give --endpoint-url"
                )
            return url
        return self.args.endpoint_url or None

    @property
    def region(self) -> str:
        if self.args.region:
            return str(self.args.region)
        if self.args.local:
            return LOCAL_REGION
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            region = boto3.session.Session().region_name
        if not region:
            raise UsageError("no AWS region: set AWS_DEFAULT_REGION or pass --region")
        return region

    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            endpoint = self.endpoint_url
            credentials: dict[str, str] = {}
            if self.args.local and not os.environ.get("AWS_ACCESS_KEY_ID"):
                credentials = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}  # moto takes any
            self._dynamodb = boto3.client(
                "dynamodb",
                region_name=self.region,
                endpoint_url=endpoint,
                config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"}),
                **credentials,
            )
        return self._dynamodb

    def store(self) -> ConfigStore:
        return ConfigStore(self.dynamodb(), self.args.config_table, cache_seconds=0)

    def control(self) -> Control:
        return Control(self.store(), author=_author())

    def state(self) -> StateStore:
        return StateStore(self.dynamodb(), self.args.state_table)

    def print(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    def warn(self, message: str) -> None:
        print(f"{PROG}: warning: {message}", file=self.err)


def _author() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"srm-control:{user}@{socket.gethostname()}"


Handler = Callable[[Session, argparse.Namespace], int]
Register = Callable[[Any, argparse.ArgumentParser], None]


def _common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """Connection options: on the top-level parser with defaults, on every command without (so they may also follow
    the command, and a value given before it is not overwritten)."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("where the configuration lives")
    group.add_argument(
        "--local",
        action="store_true",
        default=default(False),
        help="the store of the `srm run` started in this directory (.srm-local/store.url)",
    )
    group.add_argument(
        "--endpoint-url", default=default(None), help="DynamoDB endpoint (default: AWS, or $AWS_ENDPOINT_URL)"
    )
    group.add_argument("--region", default=default(None), help="AWS region (default: $AWS_DEFAULT_REGION)")
    group.add_argument(
        "--config-table",
        default=default(os.environ.get("SRM_CONFIG_TABLE", "srm-config")),
        help="config table name (default: $SRM_CONFIG_TABLE or srm-config)",
    )
    group.add_argument(
        "--state-table",
        default=default(os.environ.get("SRM_STATE_TABLE", "srm-state")),
        help="state table name (default: $SRM_STATE_TABLE or srm-state)",
    )


def _flow_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--source", required=required, metavar="ALIAS", help="source cluster alias")
    parser.add_argument("--target", required=required, metavar="ALIAS", help="target cluster alias")


# ---------------------------------------------------------------------------------------------------------------
# topics | groups
# ---------------------------------------------------------------------------------------------------------------
def _register_filters(kind: FilterKind) -> Register:
    noun = "topics" if kind == "topics" else "consumer groups"

    def register(sub: Any, common: argparse.ArgumentParser) -> None:
        p = sub.add_parser(
            kind,
            parents=[common],
            help=f"list or change which {noun} a flow replicates (allow and deny lists)",
            description=f"List or change the {noun} a flow replicates: {kind} (allow) and {kind}.exclude (deny), "
            "regexes matched against whole names. Patterns may be given as several arguments or comma-separated. "
            f"Adding to MM2's implicit default {kind} = .* replaces it with the added patterns.",
        )
        _flow_args(p)
        p.add_argument("--list", action="store_true", help="print the allow and deny lists")
        for option, dest, what in (
            ("--add", "add", "add to the allow list"),
            ("--remove", "remove", "remove from the allow list"),
            ("--add-exclude", "add_exclude", "add to the deny list (SRM's --add-blacklist works too)"),
            ("--remove-exclude", "remove_exclude", "remove from the deny list (SRM's --remove-blacklist works too)"),
        ):
            p.add_argument(option, dest=dest, nargs="+", action="extend", default=[], metavar="PATTERN", help=what)
        for srm_spelling, dest in (("--add-blacklist", "add_exclude"), ("--remove-blacklist", "remove_exclude")):
            p.add_argument(srm_spelling, dest=dest, nargs="+", action="extend", help=argparse.SUPPRESS)
        p.set_defaults(handler=lambda session, args: _filters(session, args, kind))

    return register


def _patterns(values: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        out += [p for p in parse_list(value) if p not in out]
    return tuple(out)


def _filters(session: Session, args: argparse.Namespace, kind: FilterKind) -> int:
    edit = FilterEdit(
        _patterns(args.add), _patterns(args.remove), _patterns(args.add_exclude), _patterns(args.remove_exclude)
    )
    if args.list and edit:
        raise UsageError(f"{kind}: --list cannot be combined with changes")
    if not args.list and not edit:
        raise UsageError(f"{kind}: give --list, or patterns to --add, --remove, --add-exclude or --remove-exclude")
    control = session.control()
    if args.list:
        view = control.filters(args.source, args.target, kind)
        for setting in (view.include, view.exclude):
            session.print(*_setting_lines(view, setting))
        return 0
    change = control.edit_filters(args.source, args.target, kind, edit)
    for note in change.notes:
        session.print(f"note: {note}")
    for before, after in ((change.before.include, change.after.include), (change.before.exclude, change.after.exclude)):
        name = f"{Flow(args.source, args.target)!s} {after.key}"
        if before.patterns == after.patterns:
            session.print(f"{name}: unchanged ({_show(after)})")
        else:
            session.print(f"{name}: {_show(after)}  (was: {_show(before)})")
    if change.written:
        session.print(_effect(kind, args.source, args.target, control))
    return 0


def _show(setting: PatternSetting) -> str:
    return setting.value() if setting.patterns else "<empty>"


def _setting_lines(view: FilterView, setting: PatternSetting) -> list[str]:
    lines = [f"{Flow(view.source, view.target)!s} {setting.key} ({setting.origin(view.source, view.target)}):"]
    lines += [f"  {p}" for p in setting.patterns] or ["  <empty: matches nothing>"]
    return lines


def _effect(kind: FilterKind, source: str, target: str, control: Control) -> str:
    settings = control.config().settings(source, target)
    if kind == "topics":
        return (
            "Functions see the change within their config cache: deselected topics stop at once, newly selected ones "
            "start at the next topic refresh "
            f"(refresh.topics.interval.seconds = {settings.refresh_topics_interval_seconds:g})."
        )
    return (
        "Functions see the change within their config cache; checkpoints follow at the next emit "
        f"(emit.checkpoints.interval.seconds = {settings.emit_checkpoints_interval_seconds:g})."
    )


# ---------------------------------------------------------------------------------------------------------------
# flows
# ---------------------------------------------------------------------------------------------------------------
def register_flows(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("flows", help="list, enable or disable replication flows")
    verbs = p.add_subparsers(dest="flows_command", metavar="{list,enable,disable}", required=True)
    listing = verbs.add_parser("list", parents=[common], help="every flow, enabled or not, and its filters")
    listing.set_defaults(handler=_flows_list)
    for verb in ("enable", "disable"):
        v = verbs.add_parser(
            verb,
            parents=[common],
            help=f"{verb} a flow (quote it: '{verb} \"a->b\"')",
            description=f"{verb.capitalize()} a flow: give it as 'SOURCE->TARGET' (quoted: the shell reads > as a "
            "redirection) or with --source and --target.",
        )
        v.add_argument("flow", nargs="?", metavar="SOURCE->TARGET")
        _flow_args(v, required=False)
        v.set_defaults(handler=lambda session, args, on=(verb == "enable"): _flows_set(session, args, on))


def _flow_of(args: argparse.Namespace) -> Flow:
    if args.flow and (args.source or args.target):
        raise UsageError("give the flow as SOURCE->TARGET or with --source/--target, not both")
    if args.flow:
        if "->" not in args.flow:
            hint = " (quote it: the shell took '>' as a redirection)" if args.flow.endswith("-") else ""
            raise UsageError(f"{args.flow!r} is not a flow: expected 'SOURCE->TARGET'{hint}")
        try:
            return Flow.parse(args.flow)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    if not (args.source and args.target):
        raise UsageError("name the flow: 'SOURCE->TARGET', or --source and --target")
    return Flow(args.source, args.target)


def _flows_list(session: Session, args: argparse.Namespace) -> int:
    flows = session.control().flows()
    rows = [
        [f.name, "yes" if f.enabled else "no", _brief(f, f.topics), _brief(f, f.groups), _changed(f)] for f in flows
    ]
    session.print(*table(["FLOW", "ENABLED", "TOPICS", "GROUPS", "LAST CHANGED"], rows))
    return 0


def _brief(flow: FlowInfo, setting: PatternSetting) -> str:
    text = _show(setting)
    origin = setting.origin(flow.source, flow.target)
    return text if origin == "set on the flow" else f"{text} ({origin})"


def _changed(flow: FlowInfo) -> str:
    if not flow.version:
        return "-"
    return f"v{flow.version} {flow.updated_at or ''} {flow.updated_by or ''}".strip()


def _flows_set(session: Session, args: argparse.Namespace, enabled: bool) -> int:
    source, target = _flow_of(args)
    change = session.control().set_enabled(source, target, enabled)
    state = "enabled" if enabled else "disabled"
    if not change.written:
        session.print(f"{change.flow.name}: already {state}")
        return 0
    session.print(f"{change.flow.name}: {state}")
    if args.local:
        session.print(f"The local runtime {'starts' if enabled else 'stops'} the flow's worker within seconds.")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# config import | export
# ---------------------------------------------------------------------------------------------------------------
def register_config(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("config", help="import a configuration file into the config table, or export it")
    verbs = p.add_subparsers(dest="config_command", metavar="{import,export}", required=True)
    imp = verbs.add_parser(
        "import",
        parents=[common],
        help="replace the configuration with a file (YAML or mm2.properties), validated first",
        description="Validate FILE completely, then make the config table hold exactly it, in one conditional "
        "write; nothing is written when anything is wrong. Secrets must be references (${env:NAME}, "
        "${secretsmanager:id}).",
    )
    imp.add_argument("file", type=Path, metavar="FILE")
    imp.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    imp.add_argument("--create-tables", action="store_true", help="create the config and state tables if missing")
    imp.set_defaults(handler=_config_import)
    exp = verbs.add_parser("export", parents=[common], help="print the configuration (secrets masked)")
    exp.add_argument("--format", choices=("properties", "yaml"), default="properties", help="default: properties")
    exp.set_defaults(handler=_config_export)


def _config_import(session: Session, args: argparse.Namespace) -> int:
    config = load_file(args.file)  # parses and validates everything; ConfigError names key and file:line
    for warning in config.warnings:
        session.warn(warning)
    if args.create_tables and not args.dry_run:
        create_config_table(session.dynamodb(), args.config_table)
        create_state_table(session.dynamodb(), args.state_table)
    control = session.control()
    base = control.store.read()
    result = control.import_config(config, dry_run=args.dry_run, base=base)
    enabled = len(config.enabled_flows())
    summary = (
        f"{len(config.clusters)} cluster(s), {len(config.flows)} flow(s) ({enabled} enabled); "
        f"{len(result.added)} propert{'y' if len(result.added) == 1 else 'ies'} added, {len(result.changed)} changed, "
        f"{len(result.removed)} removed"
    )
    if args.dry_run or base:
        for key, value in sorted(result.added.items()):
            session.print(f"+ {key} = {value}")
        for key, (old, new) in sorted(result.changed.items()):
            session.print(f"~ {key} = {new}  (was: {old})")
        for key, _ in sorted(result.removed.items()):
            session.print(f"- {key}")
    if args.dry_run:
        session.print(f"dry run, nothing written: {args.file} would give {summary}")
    elif result.unchanged:
        session.print(f"{args.file}: the config table {args.config_table} already holds exactly this; nothing written")
    else:
        session.print(f"imported {args.file} into {args.config_table}: {summary}")
    return 0


def _config_export(session: Session, args: argparse.Namespace) -> int:
    text = session.control().export_config(args.format)
    session.out.write(text if text.endswith("\n") else text + "\n")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------------------------
def register_status(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "status",
        parents=[common],
        help="flows, replicated topics, lag, last heartbeat and checkpoint",
        description="Per flow: enabled or not, the topics its filters select on the source now, their lag (source "
        "records not yet committed by each topic's event source mapping), and the newest heartbeat and checkpoint "
        "that reached the target. Asks the clusters; one that does not answer is reported, not fatal.",
    )
    _flow_args(p, required=False)
    p.add_argument("--topics", action="store_true", help="also list each flow's topics with their lag")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a cluster (default 10)")
    p.set_defaults(handler=_status)


def _status(session: Session, args: argparse.Namespace) -> int:
    if bool(args.source) != bool(args.target):
        raise UsageError("status: give both --source and --target, or neither")
    flows = [Flow(args.source, args.target)] if args.source else None
    probe = KafkaStatusProbe(secrets_manager_resolver(session.region), timeout=args.timeout)
    control = session.control()
    statuses = control.status(probe, session.state(), flows)
    nodes = nodes_status(
        Nodes(session.dynamodb(), args.state_table, control.config().nodes().group_id),
        [Flow(s.source, s.target) for s in statuses],
    )
    if args.json:
        json.dump([{**s.to_dict(), **flow_nodes(nodes, s.name)} for s in statuses], session.out, indent=2)
        session.out.write("\n")
        return 0
    now = time.time() * 1000
    rows = [
        [
            s.name,
            "yes" if s.enabled else "no",
            "?" if s.topics is None else str(len(s.topics)),
            "?" if s.lag is None else str(s.lag),
            age(s.last_heartbeat_ms, now),
            "-" if s.heartbeat_latency_ms is None else f"{s.heartbeat_latency_ms} ms",
            age(s.last_checkpoint_ms, now),
        ]
        for s in statuses
    ]
    headers = ["FLOW", "ENABLED", "TOPICS", "LAG", "LAST HEARTBEAT", "LATENCY", "LAST CHECKPOINT"]
    session.print(*table(headers, rows))
    for s in statuses:
        for stall in s.stalled:
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stall.since_ms / 1000))
            session.print(f"{s.name}: {stall.what} stalled since {since} ({age(stall.since_ms, now)}): {stall.reason}")
        for loss in s.losses:
            session.print(
                f"{s.name}: DATA LOSS {loss.topic}-{loss.partition} offsets {loss.start}..{loss.end - 1} "
                f"({loss.end - loss.start} offsets) purged on the source before they were replicated "
                f"(detected {age(loss.at_ms, now)})"
            )
        for reset in s.resets:
            session.print(
                f"{s.name}: TOPIC RESET {reset.topic}-{reset.partition} started over ({reset.reason}; detected "
                f"{age(reset.at_ms, now)}): its old incarnation's offset runs are archived"
            )
        for m in s.mapping_problems:
            session.print(
                f"{s.name}: MAPPING PROBLEM {m.topic} (event source mapping {m.id}, reported since "
                f"{age(m.updated_at_ms, now)}): {m.problem}"
            )
        for error in s.errors:
            session.print(f"{s.name}: {error}")
    if nodes.nodes:
        session.print("", *node_lines(nodes, now))
    if args.topics:
        for s in statuses:
            where = "as of its last topic sync" if s.topics_from == "state" else "selected on the source now"
            session.print("", f"{s.name} topics ({where}):")
            session.print(*_topic_lines(s))
    return 0


def _topic_lines(status: FlowStatus) -> list[str]:
    if status.topics is None:
        return ["  (source not reachable)"]
    if not status.topics:
        return ["  (no topic selected)"]
    rows = [[t.topic, t.remote, str(t.partitions), "?" if t.lag is None else str(t.lag)] for t in status.topics]
    return ["  " + line for line in table(["TOPIC", "REMOTE TOPIC", "PARTITIONS", "LAG"], rows)]


# ---------------------------------------------------------------------------------------------------------------
# offsets
# ---------------------------------------------------------------------------------------------------------------
def register_offsets(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "offsets",
        parents=[common],
        help="where a consumer group resumes on the target (failover), from the checkpoints there",
        description="Reads <source>.checkpoints.internal on the target, as MM2's RemoteClusterUtils does, so it works "
        "while the source is down. --export prints the CSV that `kafka-consumer-groups --reset-offsets --from-file` "
        "takes. Exit status 1 when there is nothing to fail over with (the message says why). A partition whose newest "
        "committed offset got no checkpoint (it cannot be translated exactly) is named on stderr, with why.",
    )
    _flow_args(p)
    p.add_argument("--group", required=True, help="the consumer group")
    p.add_argument("--export", action="store_true", help="print topic,partition,offset lines (CSV)")
    p.add_argument("--output", type=Path, help="with --export: write the CSV to this file")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a cluster (default 30)")
    p.set_defaults(handler=_offsets)


def _offsets(session: Session, args: argparse.Namespace) -> int:
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


# ---------------------------------------------------------------------------------------------------------------
# takeover
# ---------------------------------------------------------------------------------------------------------------
def register_takeover(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "takeover",
        parents=[common],
        help="start a flow where MirrorMaker 2 stopped (after MM2 is stopped, before srm replicates)",
        description="Per partition of the topics the flow replicates: where srm starts and where that was read. A "
        "partition srm never replicated starts at MirrorMaker 2's committed position (its offsets topic "
        "mm2-offsets.<source>.internal on the target), else after its newest offset sync, else at the log start; "
        "the position is committed to the partition's event source mapping group on the source. `srm run` and "
        "topic sync do the same by themselves before they create a mapping; run this to see it first (--dry-run), "
        "or before deploying. TAIL counts the copies MM2 made past its recorded position: srm writes them again.",
    )
    _flow_args(p)
    p.add_argument("--dry-run", action="store_true", help="print where each partition would start; write nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a cluster (default 30)")
    p.set_defaults(handler=_takeover)


def _takeover(session: Session, args: argparse.Namespace) -> int:
    config = session.store().load(fresh=True)
    flow = config.check_flow(args.source, args.target)
    report = take_over(
        config, flow, secrets_manager_resolver(session.region), dry_run=args.dry_run, timeout=args.timeout
    )
    if args.json:
        json.dump(report.to_dict(), session.out, indent=2)
        session.out.write("\n")
    else:
        session.print(*takeover_lines(report))
    return 0


COMMANDS: list[Register] = [
    _register_filters("topics"),
    _register_filters("groups"),
    register_flows,
    register_config,
    register_status,
    register_offsets,
    register_takeover,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Change what serverless-srm replicates while it runs, and see how it is doing. The "
        "configuration lives in the DynamoDB config table every function reads (through a short cache).",
        epilog="exit status: 0 done; 1 the store is unreachable or the configuration changed meanwhile (nothing "
        "written); 2 bad input (nothing written)",
    )
    _common_options(parser, defaults=True)
    common = _Parser(add_help=False)
    _common_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
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
        return handler(session, args)
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
    if not error.missing_table or args is None:
        return ""
    try:
        tables = Session(args, sys.stdout, sys.stderr).dynamodb().list_tables().get("TableNames", [])
    except Exception:  # only a hint; the error itself is already clear
        return ""
    there = ", ".join(tables) if tables else "none"
    return f" (tables there: {there}; --config-table names another, config import --create-tables creates it)"


if __name__ == "__main__":
    sys.exit(main())
