"""The documentation's references, generated from the code: the settings model, the argument parsers, the metric
names, the templates' alarms, the metrics API's OpenAPI document, the errors the code raises, the Makefile's targets.

The MkDocs hook (``hooks.py``) puts them into the pages at build time, and ``tests/unit/test_docs.py`` checks the
hand-written pages against the same functions, so a reference cannot drift from the code and a page cannot name
what the code does not have.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SRM = ROOT / "layers" / "core" / "srm"
TEMPLATES = (ROOT / "template.yaml", ROOT / "template-monitoring.yaml")

__all__ = [
    "GENERATORS",
    "cli_flags",
    "cli_reference",
    "contracts_reference",
    "emf_metrics",
    "errors_reference",
    "make_targets",
    "metrics_reference",
    "openapi_reference",
    "setting_docs",
    "settings_reference",
    "template_alarms",
    "template_names",
]


# ---------------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------------
def setting_docs() -> dict[str, dict[str, str]]:
    """What each key means and its MirrorMaker 2 equivalent (``settings.yaml``): the one thing the model cannot say.
    Every key of the model has an entry and every entry is a key (``tests/unit/test_docs.py``)."""
    with (Path(__file__).parent / "settings.yaml").open(encoding="utf-8") as f:
        data: dict[str, dict[str, str]] = yaml.safe_load(f)
    return data


def _global_defaults() -> dict[str, Callable[[Any], object]]:
    """The global-only keys, each with how the configuration reads its default (they have no pydantic model: the
    configuration's accessors parse them)."""
    from srm.config import keys, nodes

    return {
        keys.METRICS_AGGREGATION_INTERVAL: lambda c: c.metrics_aggregation_interval_seconds(),
        keys.METRICS_API_GATEWAY: lambda c: c.metrics_api_gateway(),
        keys.METRICS_API_PEERS: lambda c: c.metrics_api_peers(),
        keys.METRICS_API_DEPLOYMENT_NAME: lambda c: c.metrics_api_deployment_name(),
        nodes.NODES_GROUP_ID: lambda c: c.nodes().group_id,
        nodes.NODES_STORE_CLUSTER: lambda c: c.nodes().store_cluster,
        nodes.NODES_SESSION_TIMEOUT_MS: lambda c: c.nodes().session_timeout_ms,
    }


def global_keys() -> frozenset[str]:
    from srm.config.keys import GLOBAL_KEYS

    return GLOBAL_KEYS


def _call(value: Any) -> Any:
    return value() if callable(value) else value


def _type_of(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in get_args(annotation))
    args = [a for a in get_args(annotation) if a is not type(None)]
    if args and len(args) < len(get_args(annotation)):
        return _type_of(args[0]) + " or unset"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(metadata: list[Any]) -> str:
    words = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥"}
    found = []
    for item in metadata:
        for attr, word in words.items():
            value = getattr(item, attr, None)
            if value is not None:
                found.append(f"{word} {value:,}" if isinstance(value, int) else f"{word} {value}")
    return ", ".join(found)


def _show(value: object) -> str:
    if value is None or value == () or value == "":
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_reference() -> str:
    """Every key of the configuration: the flow settings' model, then the global-only keys, the Kafka client
    settings' prefixes and the MirrorMaker 2 / Kafka Connect keys accepted and ignored."""
    from srm.config import keys
    from srm.config.flow_settings import FlowSettings
    from srm.config.parsing import parse_config_bytes
    from srm.config.settings import SrmConfig

    docs = setting_docs()
    lines = [
        "## Replication settings",
        "",
        "From `srm.config.flow_settings.FlowSettings`. Each may be set globally, for a target cluster "
        "(`<target alias>.key`) or for one flow (`<source>-><target>.key`); the most specific wins.",
        "",
        "| key | type | default | bounds | MirrorMaker 2 | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in FlowSettings.model_fields.items():
        key = field.alias or name
        doc = docs.get(key, {})
        default = _show(field.default)
        lines.append(
            f"| `{key}` | {_type_of(field.annotation)} | {_cell(default)} | {_bounds(field.metadata)} | "
            f"{_cell(doc.get('mm2', ''))} | {_cell(doc.get('meaning', ''))} |"
        )
    config = SrmConfig.from_properties(parse_config_bytes(b"clusters = a, b\n", "defaults.properties"))
    lines += [
        "",
        "## Global settings",
        "",
        "Settings of the whole runtime (`srm.config.keys.GLOBAL_KEYS`): set without a prefix only. A default "
        "that depends on the configuration is shown for `clusters = a, b`.",
        "",
        "| key | default | MirrorMaker 2 | meaning |",
        "|---|---|---|---|",
    ]
    defaults = _global_defaults()
    for key in sorted(keys.GLOBAL_KEYS):
        doc = docs.get(key, {})
        default = _show(defaults[key](config)) if key in defaults else ""
        lines.append(f"| `{key}` | {default} | {_cell(doc.get('mm2', ''))} | {_cell(doc.get('meaning', ''))} |")
    lines += [
        "",
        "## Kafka client settings",
        "",
        "Any Kafka client setting, prefixed by the clients it is for (`srm.config.keys.client_properties`); later "
        "layers win. Common keys (`bootstrap.servers`, `security.protocol`, `client.id`, `client.rack`, `ssl.*`, "
        "`sasl.*`) apply to every client of a cluster without a role prefix. Roles: "
        + ", ".join(f"`{r}`" for r in keys.CLIENT_ROLES)
        + f"; the flow's heartbeats producer has its own prefix, `<source>-><target>.{keys.HEARTBEATS_CLIENT}."
        "producer.`.",
        "",
    ]
    lines += ["| layer | keys |", "|---|---|"]
    lines += [f"| {n} | {_cell(text)} |" for n, text in _client_layers(keys.client_properties.__doc__ or "")]
    lines += [
        "",
        "## Accepted and ignored",
        "",
        "MirrorMaker 2 and Kafka Connect keys that mean nothing here are accepted, so an existing file works "
        "unchanged; `srm check` lists them with the reason. Any other unknown key draws a warning with a suggestion.",
        "",
        "| keys | key prefixes | why they are ignored |",
        "|---|---|---|",
    ]
    for reason, names, prefixes in keys._IGNORED:  # the module's own table: the reasons srm check prints
        lines.append(
            f"| {', '.join(f'`{k}`' for k in sorted(names))} | {', '.join(f'`{p}…`' for p in prefixes)} | "
            f"{_cell(reason)} |"
        )
    return "\n".join(lines) + "\n"


def _client_layers(doc: str) -> list[tuple[str, str]]:
    """The numbered layers of :func:`srm.config.keys.client_properties`'s docstring: (its number, its text)."""
    items: list[tuple[str, str]] = []
    for line in doc.splitlines():
        stripped = re.sub(r":\w+:`", "`", line.strip()).replace("``", "`")  # reST roles and literals as Markdown
        if m := re.match(r"^(\d+)\. (.*)", stripped):
            items.append((m[1], m[2]))
        elif items and stripped:
            items[-1] = (items[-1][0], f"{items[-1][1]} {stripped}")
    return items


# ---------------------------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------------------------
def _parsers() -> dict[str, argparse.ArgumentParser]:
    from srm.cli.control import build_parser
    from srm.cli.srm import _parser as srm_parser  # private: `srm`'s parser has no other reader

    return {"srm": srm_parser(), "srm-control": build_parser()}


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def _walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for _, sub, _ in _subcommands(parser):
        yield from _walk(sub)


def cli_flags() -> dict[str, set[str]]:
    """Every option string of each program, its subcommands' included (retired, hidden ones too: the docs may say
    they are gone)."""
    return {
        prog: {s for p in _walk(parser) for a in p._actions for s in a.option_strings if s.startswith("--")}
        for prog, parser in _parsers().items()
    }


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            metavar = action.metavar or (action.dest.upper() if action.nargs != 0 else "")
            if isinstance(metavar, tuple):
                metavar = " ".join(metavar)
            name = ", ".join(action.option_strings) + (f" {metavar}" if metavar else "")
        else:
            name = str(action.metavar or action.dest)
        default = action.default
        shown = (
            ""
            if default is None
            or default is False
            or default == argparse.SUPPRESS
            or action.nargs == 0
            or isinstance(default, list)
            else f"`{default}`"
        )
        choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
        rows.append(f"| `{name}` | {_cell(_help(action))}{choices} | {shown} |")
    return rows


def _help(action: argparse.Action) -> str:
    try:
        return (action.help or "") % vars(action)  # argparse's own %(default)s expansion
    except (KeyError, TypeError, ValueError):
        return action.help or ""


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _command_section(parser: argparse.ArgumentParser, title: str, level: int, summary: str) -> list[str]:
    lines = [f"{'#' * level} `{title}`", ""]
    if summary:
        lines += [_cell(summary), ""]
    lines += ["```", _usage(parser), "```", ""]
    if parser.description and parser.description != summary:
        lines += [" ".join(parser.description.split()), ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| option | meaning | default |", "|---|---|---|", *rows, ""]
    if parser.epilog:
        lines += [" ".join(parser.epilog.split()), ""]
    for name, sub, help_text in _subcommands(parser):
        lines += _command_section(sub, f"{title} {name}", min(level + 1, 4), help_text)
    return lines


def cli_reference() -> str:
    """`srm` and `srm-control`, every command and option, from the argument parsers the programs use."""
    lines: list[str] = []
    for prog, parser in _parsers().items():
        lines += _command_section(parser, prog, 2, "")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Metrics, alarms, the metrics API
# ---------------------------------------------------------------------------------------------------------------
def _template(path: Path) -> dict[str, Any]:
    from cfnlint.decode import cfn_yaml  # reads CloudFormation's short forms (!Sub, !Ref …)

    data: dict[str, Any] = cfn_yaml.load(str(path))
    return data


def template_alarms() -> dict[str, dict[str, Any]]:
    """Every CloudWatch alarm of the templates, by logical id."""
    return {
        name: resource.get("Properties", {})
        for path in TEMPLATES
        for name, resource in _template(path).get("Resources", {}).items()
        if resource.get("Type") == "AWS::CloudWatch::Alarm"
    }


def template_names() -> set[str]:
    """The templates' parameters, resources and outputs: names a page may give in backquotes."""
    names: set[str] = set()
    for path in TEMPLATES:
        data = _template(path)
        for section in ("Parameters", "Resources", "Outputs"):
            names |= set(data.get(section, {}))
    return names


def emf_metrics() -> dict[str, str]:
    from srm.metrics.model.names import EMF_METRICS

    return dict(EMF_METRICS)


def _text(value: Any) -> str:
    """A template value as text: ``!Sub`` strings as written."""
    if isinstance(value, dict) and len(value) == 1:
        inner = next(iter(value.values()))
        return _text(inner[0] if isinstance(inner, list) else inner)
    return str(value) if value is not None else ""


def metrics_reference() -> str:
    from srm.metrics.model.names import DIMENSIONS, NAMESPACE, TABLE_ATTRIBUTES, TABLE_DISTRIBUTIONS

    lines = [
        "## CloudWatch metrics",
        "",
        f"Namespace `{NAMESPACE}`, dimensions {' and '.join(f'`{d}`' for d in DIMENSIONS)} "
        "(`srm.metrics.model.names.EMF_METRICS`).",
        "",
        "| metric | unit |",
        "|---|---|",
        *[f"| `{name}` | {unit} |" for name, unit in emf_metrics().items()],
        "",
        "## Metrics table and metrics API",
        "",
        "The aggregated metrics' attributes (`srm.metrics.model.names.TABLE_ATTRIBUTES`); distributions are maps "
        "`{count, min, max, avg, p50, p95, p99}`.",
        "",
        "| attribute | distribution |",
        "|---|---|",
        *[f"| `{name}` | {'yes' if name in TABLE_DISTRIBUTIONS else ''} |" for name in TABLE_ATTRIBUTES],
        "",
        "## Alarms",
        "",
        "The CloudWatch alarms of the templates (`template.yaml`: one set per flow stack).",
        "",
        "| alarm | name | metric | threshold | description |",
        "|---|---|---|---|---|",
    ]
    for name, props in template_alarms().items():
        metric = props.get("MetricName") or ", ".join(
            q["MetricStat"]["Metric"]["MetricName"] for q in props.get("Metrics", []) if "MetricStat" in q
        )
        lines.append(
            f"| `{name}` | `{_cell(_text(props.get('AlarmName')))}` | `{metric}` | "
            f"{_cell(_text(props.get('Threshold')))} | {_cell(_text(props.get('AlarmDescription')))} |"
        )
    return "\n".join(lines) + "\n"


def openapi_reference() -> str:
    """The metrics API's routes from ``openapi/metrics-api.json``, the document the code generates."""
    spec = json.loads((ROOT / "openapi" / "metrics-api.json").read_text(encoding="utf-8"))
    info = spec.get("info", {})
    lines = [f"**{info.get('title', 'Metrics API')}** {info.get('version', '')}", ""]
    if info.get("description"):
        lines += [info["description"], ""]
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            if not isinstance(op, dict):
                continue
            lines += [f"### `{method.upper()} {path}`", ""]
            if op.get("summary") or op.get("description"):
                lines += [" ".join(str(op.get("description") or op.get("summary")).split()), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
                for p in params:
                    schema = p.get("schema", {})
                    kind = schema.get("type") or "/".join(s.get("type", "") for s in schema.get("anyOf", []))
                    lines.append(
                        f"| `{p['name']}` | {p.get('in', '')} | {'yes' if p.get('required') else ''} | {kind} | "
                        f"{_cell(str(p.get('description', '')))} |"
                    )
                lines.append("")
            responses = op.get("responses", {})
            if responses:
                lines += [
                    "Responses: "
                    + "; ".join(f"`{code}` {_cell(str(r.get('description', '')))}" for code, r in responses.items()),
                    "",
                ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Errors and make targets
# ---------------------------------------------------------------------------------------------------------------
# Python's own errors: a bug or a programming error, not a message a user reads
_GENERIC = {
    "ValueError", "TypeError", "KeyError", "RuntimeError", "AssertionError", "NotImplementedError", "OSError",
    "AttributeError", "LookupError", "IndexError",
}  # fmt: skip


def _message(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        return None if left is None or right is None else left + right
    return None


def raised_errors() -> dict[str, list[tuple[str, str]]]:
    """``{module: [(error class, message with … for what varies)]}``: every srm error raised with a message."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(SRM.rglob("*.py")):
        module = ".".join(path.relative_to(SRM.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            message = _message(node.exc.args[0])
            if not (name.endswith("Error") and name not in _GENERIC and message):
                continue
            text = " ".join(message.split())
            words = re.sub(r"[^A-Za-z]+", "", text.replace("…", ""))
            errors = found.setdefault(module, [])
            if len(words) >= 12 and (name, text) not in errors:  # "…: …" says nothing by itself
                errors.append((name, text))
    found = {module: errors for module, errors in found.items() if errors}
    return found


def errors_reference() -> str:
    lines = [
        "Every error the code raises with a message, by module (`…` stands for what varies: a key, a value, a "
        "cluster). The CLIs print it as one line, prefixed by `srm:` or `srm-control:`; see the tables above for "
        "what the common ones mean.",
        "",
    ]
    for module, errors in raised_errors().items():
        lines += [f"### `{module}`", "", "| error | message |", "|---|---|"]
        lines += [f"| `{name}` | {_escaped(message)} |" for name, message in errors]
        lines.append("")
    return "\n".join(lines)


def contracts_reference() -> str:
    """The import-linter contracts of ``pyproject.toml``, as ``lint-imports`` checks them."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    lines = ["| contract | kind | modules |", "|---|---|---|"]
    for c in config["contracts"]:
        if c["type"] == "layers":
            modules = " > ".join(f"`{layer}`" for layer in c["layers"])
        elif c["type"] == "forbidden":
            modules = (
                ", ".join(f"`{m}`" for m in c["source_modules"])
                + " never import "
                + ", ".join(f"`{m}`" for m in c["forbidden_modules"])
            )
        else:
            modules = ", ".join(f"`{m}`" for m in c.get("ancestors", []))
        lines.append(f"| {_cell(c['name'])} | {c['type']} | {modules} |")
    return "\n".join(lines) + "\n"


def _escaped(message: str) -> str:
    """A message as table text: no backquotes, brackets escaped (``[…][0]`` would read as a cross-reference)."""
    return _cell(message).replace("`", "").replace("[", "\\[").replace("]", "\\]")


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m[1] for m in re.finditer(r"^([a-z][\w-]*)\s*:(?!=)", text, re.MULTILINE)}


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "cli": cli_reference,
    "metrics": metrics_reference,
    "openapi": openapi_reference,
    "errors": errors_reference,
    "contracts": contracts_reference,
}
