"""``srm-control``'s commands that change or show the configuration: ``topics``, ``groups``, ``flows``, ``config``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srm.aws.config_table import create_config_table
from srm.aws.state import create_state_table
from srm.cli.control_session import Register, Session, UsageError, flow_args
from srm.cli.options import add_command
from srm.cli.tables import table
from srm.config.connectors import load_config
from srm.control.edits import Control, FilterEdit, FilterKind, FilterView, FlowInfo, PatternSetting
from srm.core.filters import parse_list
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = ["register_config", "register_filters", "register_flows"]


# ---------------------------------------------------------------------------------------------------------------
# topics | groups
# ---------------------------------------------------------------------------------------------------------------
def register_filters(kind: FilterKind) -> Register:
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
        flow_args(p)
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
    add_command(verbs, "list", _flows_list, parents=[common])
    for verb in ("enable", "disable"):
        v = verbs.add_parser(
            verb,
            parents=[common],
            help=f"{verb} a flow (quote it: '{verb} \"a->b\"')",
            description=f"{verb.capitalize()} a flow: give it as 'SOURCE->TARGET' (quoted: the shell reads > as a "
            "redirection) or with --source and --target.",
        )
        v.add_argument("flow", nargs="?", metavar="SOURCE->TARGET")
        flow_args(v, required=False)
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
    """every flow, enabled or not, and its filters"""
    flows = session.control().flows()
    rows = [
        [f.name, "yes" if f.enabled else "no", _brief(f, f.topics), _brief(f, f.groups), _changed(f)] for f in flows
    ]
    session.print(*table(["FLOW", "ENABLED", "TOPICS", "GROUPS", "LAST CHANGED"], rows))
    chains = [f"{f.name} transforms: {' -> '.join(f.transforms)}" for f in flows if f.transforms]
    if chains:
        session.print("", *chains)
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
    imp = add_command(verbs, "import", _config_import, parents=[common])
    imp.add_argument(
        "file",
        type=Path,
        metavar="FILE",
        help="YAML, mm2.properties, or a folder of MirrorMaker 2 connector definitions",
    )
    imp.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    imp.add_argument("--create-tables", action="store_true", help="create the config and state tables if missing")
    exp = add_command(verbs, "export", _config_export, parents=[common])
    exp.add_argument("--format", choices=("properties", "yaml"), default="properties", help="default: properties")


def _config_import(session: Session, args: argparse.Namespace) -> int:
    """replace the configuration with a file (YAML or mm2.properties) or connector definitions, validated first

    Validate FILE completely, then make the config table hold exactly it, in one conditional write; nothing is written
    when anything is wrong. Secrets must be references (${env:NAME}, ${secretsmanager:id}).
    """
    config = load_config(args.file)  # parses and validates everything; ConfigError names key and file:line
    for warning in config.warnings:
        session.warn(warning)
    if args.create_tables and not args.dry_run and not session.in_kafka:
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
    where = f"the {'configuration in' if session.in_kafka else 'config table'} {control.store.table}"
    if args.dry_run:
        session.print(f"dry run, nothing written: {args.file} would give {summary}")
    elif result.unchanged:
        session.print(f"{args.file}: {where} already holds exactly this; nothing written")
    else:
        session.print(f"imported {args.file} into {control.store.table}: {summary}")
    return 0


def _config_export(session: Session, args: argparse.Namespace) -> int:
    """print the configuration (secrets masked)"""
    text = session.control().export_config(args.format)
    session.out.write(text if text.endswith("\n") else text + "\n")
    return 0
