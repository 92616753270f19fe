"""The use cases of ``srm-control``: change what is replicated while it runs, and see how replication is doing.

Every change is a read-modify-write of the config table (:mod:`srm.config_store`): read a snapshot, compute the
new property map, validate all of it (:meth:`SrmConfig.from_properties`), then commit conditionally on the
snapshot. Invalid input writes nothing; a concurrent edit makes the commit fail with ``ConfigConflictError`` and
writes nothing either.

Functions read the table through a short cache, so a change reaches every function of every flow within one
refresh: a deselected topic's batches fail the mirror's filter check at once (retried, never committed) and its
event source mapping is stopped at the next topic sync; a newly selected topic gets its remote topic and mapping at
the next topic sync (``refresh.topics.interval.seconds``).

Allow/deny list edits (``topics``/``groups`` and their ``.exclude``) follow what an SRM operator expects:

- A flow's own value (``a->b.topics``) is edited; when the flow has none yet, the value it inherits (``b.topics``,
  ``topics``) is the starting point and the flow gets its own copy.
- ``--add`` to a flow that still has MM2's implicit default ``topics = .*`` (or ``groups = .*``) *replaces* the
  default: adding ``orders`` means "replicate orders", not "everything, and orders too". An explicitly configured
  ``.*`` is kept (and the operator is told that it already selects everything).
- The deny lists keep their defaults when extended (``.*[\\-\\.]internal``… stay excluded).
- Removing a pattern that is not in the list but still matched by another pattern of it is refused, with the
  hint to exclude it instead: the operator's intent (stop replicating it) would silently not happen otherwise.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import yaml
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.config import (
    ConfigError,
    Properties,
    SrmConfig,
    _to_str,
    flow_name,
    resolve,
)
from srm.config_store import (
    ConfigSnapshot,
    ConfigStore,
    ConfigStoreError,
    is_plain_secret,
    scope_key,
    split_scopes,
)
from srm.filters import (
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    FilterError,
    PatternList,
    parse_list,
    should_replicate_topic,
)
from srm.formats import FormatError, Heartbeat
from srm.kafka import (
    KafkaUnavailableError,
    SecretResolver,
    TopicInfo,
    admin_config,
    build,
    consumer_config,
    default_secret_resolver,
    list_topics,
)
from srm.state import StateError, StateStore, TopicMappingRecord
from srm.topics import mapping_group_id, plan_topics

__all__ = [
    "Control",
    "ControlError",
    "FilterChange",
    "FilterEdit",
    "FilterView",
    "FlowChange",
    "FlowInfo",
    "FlowStatus",
    "ImportResult",
    "KafkaStatusProbe",
    "PatternSetting",
    "Stall",
    "StatusProbe",
    "TopicStatus",
    "format_properties",
    "format_yaml",
    "mask_secrets",
]

log = logging.getLogger(__name__)

FilterKind = Literal["topics", "groups"]
_DEFAULTS = {
    "topics": DEFAULT_TOPICS,
    "topics.exclude": DEFAULT_TOPICS_EXCLUDE,
    "groups": DEFAULT_GROUPS,
    "groups.exclude": DEFAULT_GROUPS_EXCLUDE,
}
_NAME_LIKE = re.compile(r"^[A-Za-z0-9._\-]+$")
_MASK = "********"


class ControlError(ValueError):
    """The operator's request cannot be applied as asked; nothing was written."""


# What asking a cluster may raise: it does not answer, a client cannot be built, a record does not decode.
_PROBE_ERRORS = (KafkaException, KafkaUnavailableError, ConfigError, OSError, ValueError, RuntimeError)


# ---------------------------------------------------------------------------------------------------------------
# Allow / deny lists
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PatternSetting:
    """One pattern list as a flow sees it, and the property that sets it (None: MM2's default)."""

    key: str  # topics | topics.exclude | groups | groups.exclude
    patterns: tuple[str, ...]
    defined_by: str | None

    def origin(self, source: str, target: str) -> str:
        if self.defined_by is None:
            return "default"
        if self.defined_by == f"{flow_name(source, target)}.{self.key}":
            return "set on the flow"
        return f"inherited from {self.defined_by}"

    def value(self) -> str:
        return ", ".join(self.patterns)


@dataclass(frozen=True)
class FilterView:
    source: str
    target: str
    kind: FilterKind
    include: PatternSetting
    exclude: PatternSetting


@dataclass(frozen=True)
class FilterEdit:
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    add_exclude: tuple[str, ...] = ()
    remove_exclude: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.remove or self.add_exclude or self.remove_exclude)

    def patterns(self) -> tuple[str, ...]:
        return self.add + self.remove + self.add_exclude + self.remove_exclude


@dataclass(frozen=True)
class FilterChange:
    before: FilterView
    after: FilterView
    written: bool
    notes: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------------------------
# Flows, import, status
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlowInfo:
    source: str
    target: str
    enabled: bool
    topics: PatternSetting
    groups: PatternSetting
    version: int = 0
    updated_at: str | None = None
    updated_by: str | None = None

    @property
    def name(self) -> str:
        return flow_name(self.source, self.target)


@dataclass(frozen=True)
class FlowChange:
    flow: FlowInfo
    written: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportResult:
    """What an import changes, by property (secret values masked)."""

    added: dict[str, str]
    changed: dict[str, tuple[str, str]]
    removed: dict[str, str]
    scopes: tuple[str, ...]  # the scopes written or deleted
    written: bool
    config: SrmConfig

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.changed or self.removed)


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    remote: str
    partitions: int
    lag: int | None  # records on the source not yet committed by the topic's event source mapping


@dataclass(frozen=True)
class Stall:
    """Something of a flow stuck for longer than the local runtime's bound, as its worker recorded it."""

    what: str  # "topic <name>" or "function <name>"
    since_ms: int
    reason: str


@dataclass(frozen=True)
class FlowStatus:
    source: str
    target: str
    enabled: bool
    topics: tuple[TopicStatus, ...] | None  # None: the source could not be asked
    last_heartbeat_ms: int | None = None  # the newest heartbeat replicated to the target (its emit time)
    last_checkpoint_ms: int | None = None  # when the flow last emitted checkpoints
    errors: tuple[str, ...] = ()
    topics_from: str = "source"  # "state": the flow's topic mappings; "source": the source cluster's topics
    heartbeat_latency_ms: int | None = None  # replication latency of the newest heartbeat, when recorded
    stalled: tuple[Stall, ...] = ()

    @property
    def name(self) -> str:
        return flow_name(self.source, self.target)

    @property
    def lag(self) -> int | None:
        if self.topics is None or any(t.lag is None for t in self.topics):
            return None
        return sum(t.lag or 0 for t in self.topics)

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": self.name,
            "source": self.source,
            "target": self.target,
            "enabled": self.enabled,
            "topicCount": None if self.topics is None else len(self.topics),
            "lag": self.lag,
            "topicsFrom": self.topics_from,
            "lastHeartbeat": _iso(self.last_heartbeat_ms),
            "heartbeatLatencyMs": self.heartbeat_latency_ms,
            "lastCheckpoint": _iso(self.last_checkpoint_ms),
            "topics": None
            if self.topics is None
            else [
                {"topic": t.topic, "remoteTopic": t.remote, "partitions": t.partitions, "lag": t.lag}
                for t in self.topics
            ],
            "stalled": [{"what": s.what, "since": _iso(s.since_ms), "reason": s.reason} for s in self.stalled],
            "errors": list(self.errors),
        }


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


class StatusProbe(Protocol):
    """What ``status`` asks the clusters (:class:`KafkaStatusProbe` asks real ones; tests pass their own)."""

    def topics(self, config: SrmConfig, alias: str) -> Mapping[str, TopicInfo]: ...

    def lag(self, config: SrmConfig, source: str, target: str, topics: Mapping[str, int]) -> dict[str, int | None]: ...

    def last_heartbeat(self, config: SrmConfig, source: str, target: str) -> int | None: ...

    def last_checkpoint(self, config: SrmConfig, source: str, target: str) -> int | None: ...


# ---------------------------------------------------------------------------------------------------------------
# The use cases
# ---------------------------------------------------------------------------------------------------------------
class Control:
    """``srm-control``'s verbs over one config table. ``base`` arguments let a caller (or a test) say which snapshot
    a change is computed from; by default each call reads a fresh one."""

    def __init__(self, store: ConfigStore, *, author: str | None = None) -> None:
        self.store = store
        self.author = author

    # -- reading ------------------------------------------------------------------------------------------------
    def snapshot(self) -> ConfigSnapshot:
        base = self.store.read()
        if not base:
            raise ConfigStoreError(
                f"config table {self.store.table} is empty: import a configuration first (srm-control config import "
                "FILE)"
            )
        return base

    def config(self, base: ConfigSnapshot | None = None) -> SrmConfig:
        return SrmConfig.from_properties((base or self.snapshot()).properties())

    def filters(self, source: str, target: str, kind: FilterKind, base: ConfigSnapshot | None = None) -> FilterView:
        config = self.config(base)
        _check_flow(config, source, target)
        return _view(config.properties, source, target, kind)

    def flows(self, base: ConfigSnapshot | None = None) -> list[FlowInfo]:
        base = base or self.snapshot()
        config = self.config(base)
        return [_flow_info(config, base, s, t) for s, t in config.flows]

    # -- changing -----------------------------------------------------------------------------------------------
    def edit_filters(
        self, source: str, target: str, kind: FilterKind, edit: FilterEdit, base: ConfigSnapshot | None = None
    ) -> FilterChange:
        """Apply ``edit`` to the flow's allow and deny lists of ``kind`` in one conditional write (see the module
        docstring for the semantics). Raises ControlError/ConfigError (nothing written) or ConfigConflictError."""
        if not edit:
            raise ControlError("nothing to change: give --add, --remove, --add-exclude or --remove-exclude (or --list)")
        for pattern in edit.patterns():
            try:
                PatternList((pattern,), kind)
            except FilterError as e:
                raise ControlError(f"'{pattern}' is not a valid regex ({e.reason}); nothing was written") from None
        for adds, removes in ((edit.add, edit.remove), (edit.add_exclude, edit.remove_exclude)):
            both = sorted(set(adds) & set(removes))
            if both:
                raise ControlError(f"'{both[0]}' is both added and removed; nothing was written")
        base = base or self.snapshot()
        config = self.config(base)
        _check_flow(config, source, target)
        before = _view(config.properties, source, target, kind)
        flow = flow_name(source, target)
        notes: list[str] = []
        include = _edit_list(flow, before.include, edit.add, edit.remove, notes, replace_default=True)
        exclude = _edit_list(flow, before.exclude, edit.add_exclude, edit.remove_exclude, notes, replace_default=False)
        _explain_additions(config, source, target, kind, edit.add, exclude, notes)
        updates = {
            setting.key: ", ".join(patterns)
            for setting, patterns in ((before.include, include), (before.exclude, exclude))
            if tuple(patterns) != setting.patterns
        }
        if not updates:
            return FilterChange(before, before, False, tuple(notes))
        for key in updates:
            setting = before.include if key == before.include.key else before.exclude
            if setting.defined_by is not None and setting.origin(source, target) != "set on the flow":
                notes.append(
                    f"{flow} now has its own {key}; later changes of {setting.defined_by} no longer apply to it"
                )
        if not include:
            what = "topic (heartbeats are still replicated)" if kind == "topics" else "consumer group"
            notes.append(f"{flow} {kind} is now empty: no {what} is selected")
        new_config = self._write_flow(base, config, source, target, updates)
        return FilterChange(before, _view(new_config.properties, source, target, kind), True, tuple(notes))

    def set_enabled(self, source: str, target: str, enabled: bool, base: ConfigSnapshot | None = None) -> FlowChange:
        base = base or self.snapshot()
        config = self.config(base)
        _check_flow(config, source, target)
        if config.settings(source, target).enabled == enabled:
            state = "enabled" if enabled else "disabled"
            return FlowChange(_flow_info(config, base, source, target), False, (f"already {state}",))
        new_config = self._write_flow(base, config, source, target, {"enabled": "true" if enabled else "false"})
        return FlowChange(_flow_info(new_config, self.store.read(), source, target), True)

    def import_config(
        self, config: SrmConfig, *, dry_run: bool = False, base: ConfigSnapshot | None = None
    ) -> ImportResult:
        """Make the table hold exactly ``config`` (already parsed and validated from its file), in one conditional
        transaction; secrets must be references (``plan_replace`` checks, before anything is written)."""
        base = self.store.read() if base is None else base
        changes = self.store.plan_replace(config, base)
        old, new = mask_secrets(base.properties()), mask_secrets(config.properties)
        result = ImportResult(
            added={k: v for k, v in new.items() if k not in old},
            changed={k: (old[k], v) for k, v in new.items() if k in old and old[k] != v},
            removed={k: v for k, v in old.items() if k not in new},
            scopes=tuple(sorted(changes)),
            written=bool(changes) and not dry_run,
            config=config,
        )
        if changes and not dry_run:
            self.store.commit(base, changes, author=self.author)
        return result

    def export_config(
        self, fmt: Literal["properties", "yaml"] = "properties", base: ConfigSnapshot | None = None
    ) -> str:
        props = (base or self.snapshot()).properties()
        clusters = parse_list(props.get("clusters"))
        masked = mask_secrets(props)
        return format_yaml(masked, clusters) if fmt == "yaml" else format_properties(masked, clusters)

    def status(
        self,
        probe: StatusProbe,
        state: StateStore | None = None,
        flows: Sequence[tuple[str, str]] | None = None,
        base: ConfigSnapshot | None = None,
    ) -> list[FlowStatus]:
        """Each flow's state as the state table and the clusters tell it; what cannot be asked is reported per flow
        (see :func:`_flow_status`)."""
        config = self.config(base)
        for flow in flows or ():
            _check_flow(config, *flow)
        return [_flow_status(config, probe, state, s, t) for s, t in (flows or config.flows)]

    # -- plumbing -----------------------------------------------------------------------------------------------
    def _write_flow(
        self, base: ConfigSnapshot, config: SrmConfig, source: str, target: str, updates: Mapping[str, str]
    ) -> SrmConfig:
        """Validate the whole configuration with ``updates`` on the flow, then write the flow's scope conditionally."""
        props = Properties(dict(config.properties.data), dict(config.properties.origins), config.properties.source)
        prefix = flow_name(source, target) + "."
        for key, value in updates.items():
            props.set(prefix + key, value, "this change")
        new_config = SrmConfig.from_properties(props)  # ConfigError names the key; nothing written
        sk = scope_key(flow=(source, target))
        scope = base.scope(sk)
        self.store.commit(base, {sk: {**scope.properties, **updates}}, author=self.author)
        return new_config


def _check_flow(config: SrmConfig, source: str, target: str) -> None:
    for side, alias in (("source", source), ("target", target)):
        if alias not in config.clusters:
            hint = difflib.get_close_matches(alias, list(config.clusters), n=1)
            raise ControlError(
                f"unknown cluster alias '{alias}' (the {side}); clusters: {', '.join(config.clusters)}"
                + (f"; did you mean '{hint[0]}'?" if hint else "")
            )
    if source == target:
        raise ControlError(f"{flow_name(source, target)}: a flow needs two different clusters")
    if (source, target) not in config.flows:
        known = ", ".join(flow_name(*f) for f in config.flows) or "none"
        raise ControlError(
            f"flow {flow_name(source, target)} does not exist (flows: {known}); define it in the configuration "
            f"({flow_name(source, target)}.enabled = true) and import it with srm-control config import"
        )


def _setting(props: Mapping[str, str], key: str, source: str, target: str) -> PatternSetting:
    found = resolve(props, key, source=source, target=target)
    if found is None:
        return PatternSetting(key, parse_list(_DEFAULTS[key]), None)
    return PatternSetting(key, parse_list(found[0]), found[1])


def _view(props: Mapping[str, str], source: str, target: str, kind: FilterKind) -> FilterView:
    return FilterView(
        source, target, kind, _setting(props, kind, source, target), _setting(props, f"{kind}.exclude", source, target)
    )


def _matching(patterns: Iterable[str], name: str) -> str | None:
    return next((p for p in patterns if re.fullmatch(p, name)), None)


def _edit_list(
    flow: str,
    setting: PatternSetting,
    adds: Sequence[str],
    removes: Sequence[str],
    notes: list[str],
    *,
    replace_default: bool,
) -> list[str]:
    """The pattern list after removing then adding; raises ControlError when a removal could not do what it means."""
    key = setting.key
    patterns = list(setting.patterns)
    for pattern in removes:
        if pattern in patterns:
            patterns = [p for p in patterns if p != pattern]
            continue
        still = _matching(patterns, pattern)
        if still is None:
            notes.append(f"'{pattern}' is not in {flow} {key}: nothing to remove")
        elif key.endswith(".exclude"):
            raise ControlError(
                f"'{pattern}' is not in {flow} {key}, and '{still}' there still excludes it; nothing was written "
                f"(remove '{still}' with --remove-exclude to replicate it)"
            )
        else:
            raise ControlError(
                f"'{pattern}' is not in {flow} {key}, and '{still}' there still selects it; nothing was written "
                f"(to stop replicating '{pattern}', add it to the deny list: --add-exclude '{pattern}')"
            )
    if adds and replace_default and setting.defined_by is None and patterns == list(setting.patterns):
        # MM2's implicit ".*": an operator adding patterns means "these", not "everything and these".
        patterns = []
        notes.append(f"{flow} {key} was MM2's default '{setting.value()}' (everything); now only the added patterns")
    for pattern in adds:
        if pattern in patterns:
            notes.append(f"'{pattern}' is already in {flow} {key}")
            continue
        already = _matching(patterns, pattern)
        if already is not None:
            notes.append(f"'{pattern}' is already matched by '{already}' in {flow} {key}")
        patterns.append(pattern)
    return patterns


def _explain_additions(
    config: SrmConfig,
    source: str,
    target: str,
    kind: FilterKind,
    adds: Sequence[str],
    exclude: Sequence[str],
    notes: list[str],
) -> None:
    """Tell the operator when an added name will still not be replicated (denied, or internal)."""
    flow = flow_name(source, target)
    policy = config.policy(source, target)
    for pattern in adds:
        denied = _matching(exclude, pattern)
        if denied is not None:
            notes.append(f"'{pattern}' is also matched by {flow} {kind}.exclude ('{denied}'): it stays excluded")
        elif kind == "topics" and _NAME_LIKE.match(pattern) and policy.is_internal_topic(pattern):
            notes.append(f"'{pattern}' is an internal topic name: internal topics are never replicated")


def _flow_info(config: SrmConfig, base: ConfigSnapshot, source: str, target: str) -> FlowInfo:
    scope = base.scope(scope_key(flow=(source, target)))
    return FlowInfo(
        source,
        target,
        config.settings(source, target).enabled,
        _setting(config.properties, "topics", source, target),
        _setting(config.properties, "groups", source, target),
        scope.version,
        scope.updated_at,
        scope.updated_by,
    )


def _flow_status(
    config: SrmConfig, probe: StatusProbe, state: StateStore | None, source: str, target: str
) -> FlowStatus:
    """What the flow replicates and how far behind it is. Topics come from the flow's topic mappings in the state
    table (written by each topic sync) still selected by the current filters, or, before any topic sync, from the
    source cluster's topics through the replicate decision; heartbeat and checkpoint times from the flow status
    the functions record, or else from the newest records that reached the target."""
    settings = config.settings(source, target)
    policy = config.policy(source, target)
    errors: list[str] = []
    facts: Mapping[str, int | str] = {}
    mappings: Mapping[str, TopicMappingRecord] = {}
    if state is not None:
        try:
            facts, mappings = state.flow_status(source, target), state.topic_mappings(source, target)
        except StateError as e:
            errors.append(f"state table: {_reason(e)}")
    selected: dict[str, tuple[str, int]] | None = None
    topics_from = "state" if mappings else "source"
    if mappings:
        topic_filter = settings.topic_filter()
        selected = {
            t: (m.remote_topic, m.partitions)
            for t, m in mappings.items()
            if should_replicate_topic(t, target_alias=target, policy=policy, topic_filter=topic_filter)
        }
    else:
        try:
            plan = plan_topics(
                probe.topics(config, source), source=source, target=target, policy=policy, settings=settings
            )
            selected = dict(plan.replicated)
        except _PROBE_ERRORS as e:  # a cluster that does not answer is a status line, not a failure of the command
            errors.append(f"source {source}: {_reason(e)}")
    topics: tuple[TopicStatus, ...] | None = None
    if selected is not None:
        data = {t: rp for t, rp in sorted(selected.items()) if not policy.is_heartbeats_topic(t)}
        lags: dict[str, int | None] = {}
        try:
            lags = probe.lag(config, source, target, {t: p for t, (_, p) in data.items()}) if data else {}
        except _PROBE_ERRORS as e:
            errors.append(f"source {source}: {_reason(e)}")
        topics = tuple(TopicStatus(t, remote, p, lags.get(t)) for t, (remote, p) in data.items())
    heartbeat, checkpoint = _fact(facts, "heartbeat_ms"), _fact(facts, "last_checkpoint_ms")
    try:
        if heartbeat is None:
            heartbeat = probe.last_heartbeat(config, source, target)
        if checkpoint is None:
            checkpoint = probe.last_checkpoint(config, source, target)
    except _PROBE_ERRORS as e:  # same: reported, the other flows still shown
        errors.append(f"target {target}: {_reason(e)}")
    return FlowStatus(
        source,
        target,
        settings.enabled,
        topics,
        heartbeat,
        checkpoint,
        tuple(errors),
        topics_from=topics_from,
        heartbeat_latency_ms=_fact(facts, "heartbeat_latency_ms"),
        stalled=_stalls(facts),
    )


def _stalls(facts: Mapping[str, int | str]) -> tuple[Stall, ...]:
    """The ``stalled`` fact a local worker's watchdog records (JSON: what → since, reason); none when unreadable."""
    try:
        recorded = json.loads(str(facts.get("stalled") or "{}"))
        return tuple(Stall(what, int(s["since"]), str(s["reason"])) for what, s in sorted(recorded.items()))
    except (ValueError, TypeError, KeyError, AttributeError):
        return ()


def _fact(facts: Mapping[str, int | str], name: str) -> int | None:
    value = facts.get(name)
    return value if isinstance(value, int) and value > 0 else None


def _reason(e: Exception) -> str:
    cause = e.__cause__ if isinstance(e.__cause__, KafkaException) else e
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        return f"no answer ({cause.args[0].str()})"
    text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


# ---------------------------------------------------------------------------------------------------------------
# Export formats (pure)
# ---------------------------------------------------------------------------------------------------------------
def mask_secrets(props: Mapping[str, str]) -> dict[str, str]:
    """Secret values masked, unless they are references (``${env:…}``, ``${secretsmanager:…}``)."""
    return {k: (_MASK if is_plain_secret(k, v) else v) for k, v in props.items()}


_FIRST = ("clusters", "bootstrap.servers", "enabled", "topics", "topics.exclude", "groups", "groups.exclude")


def _ordered(values: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(values.items(), key=lambda kv: (_FIRST.index(kv[0]) if kv[0] in _FIRST else len(_FIRST), kv[0]))


def _scopes_in_order(props: Mapping[str, str], clusters: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    scopes = split_scopes(props, tuple(clusters))
    order = ["global", *(scope_key(cluster=c) for c in clusters)]
    order += sorted(sk for sk in scopes if sk not in order)
    return [(sk, scopes[sk]) for sk in order if sk in scopes]


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif (key and ch in " =:#!") or (i == 0 and ch in " #!"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], clusters: Sequence[str]) -> str:
    """An ``mm2.properties`` that parses back (:func:`srm.config.parse_properties_text`) to exactly ``props``."""
    lines: list[str] = []
    for sk, values in _scopes_in_order(props, clusters):
        if not values:
            continue
        kind, _, name = sk.partition("#")
        prefix = "" if sk == "global" else name + "."
        lines.append(f"# {'global settings' if sk == 'global' else f'{kind} {name}'}")
        lines += [f"{_escape(prefix + k, key=True)} = {_escape(v, key=False)}" for k, v in _ordered(values)]
        lines.append("")
    return "\n".join(lines)


def _yaml_value(value: str) -> Any:
    """A native YAML scalar when it reads back as the same string (``true``, ``3``), else the string."""
    try:
        native = yaml.safe_load(value) if value else value
    except yaml.YAMLError:
        return value
    if isinstance(native, bool | int | float) and _to_str(native) == value:
        return native
    return value


def format_yaml(props: Mapping[str, str], clusters: Sequence[str]) -> str:
    """The YAML form (``clusters:``, ``flows:``, global keys) that parses back to the same property map."""
    doc: dict[str, Any] = {"clusters": {c: {} for c in clusters}}
    flows: dict[str, dict[str, Any]] = {}
    for sk, values in _scopes_in_order(props, clusters):
        kind, _, name = sk.partition("#")
        converted = {k: _yaml_value(v) for k, v in _ordered(values)}
        if sk == "global":
            doc.update({k: v for k, v in converted.items() if k != "clusters"})
        elif kind == "cluster":
            doc["clusters"][name] = converted
        else:
            flows[name] = converted
    if flows:
        doc["flows"] = flows
    # Keep `clusters` and `flows` on top, the global settings after them.
    ordered = {"clusters": doc.pop("clusters"), **({"flows": doc.pop("flows")} if "flows" in doc else {}), **doc}
    return yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)


# ---------------------------------------------------------------------------------------------------------------
# The status probe on real clusters
# ---------------------------------------------------------------------------------------------------------------
class KafkaStatusProbe:
    """:class:`StatusProbe` over the clusters' own APIs. It only reads: listing offsets and a group's committed
    offsets joins no group, and tails are read by assignment without committing."""

    # The answer is the exception: librdkafka's own retry chatter would bury the status table.
    _QUIET = {"log_level": "0"}

    def __init__(self, resolver: SecretResolver = default_secret_resolver, timeout: float = 10.0) -> None:
        self._resolver = resolver
        self._timeout = timeout
        self._topics: dict[str, dict[str, TopicInfo]] = {}
        self._admins: dict[str, AdminClient] = {}
        self._unreachable: dict[str, Exception] = {}

    def _admin(self, config: SrmConfig, alias: str) -> AdminClient:
        if alias not in self._admins:
            conf = {**admin_config(config, alias, None, self._resolver), **self._QUIET}
            self._admins[alias] = build(AdminClient, conf, config, alias, "admin")
        return self._admins[alias]

    def topics(self, config: SrmConfig, alias: str) -> Mapping[str, TopicInfo]:
        if alias in self._unreachable:  # asked once per status: a dead cluster costs one timeout, not one per flow
            raise self._unreachable[alias]
        if alias not in self._topics:
            try:
                self._topics[alias] = list_topics(self._admin(config, alias), timeout=self._timeout)
            except (KafkaUnavailableError, ConfigError) as e:
                self._unreachable[alias] = e
                raise
        return self._topics[alias]

    def lag(self, config: SrmConfig, source: str, target: str, topics: Mapping[str, int]) -> dict[str, int | None]:
        if source in self._unreachable:
            raise self._unreachable[source]
        admin = self._admin(config, source)
        tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        latest = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=self._timeout)
        earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, request_timeout=self._timeout)
        committed = {}
        for topic, n in topics.items():  # one group per request (librdkafka); the requests run concurrently
            group = mapping_group_id(source, target, topic)
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(n)])
            committed[topic] = admin.list_consumer_group_offsets([request], request_timeout=self._timeout)[group]
        result: dict[str, int | None] = {}
        for topic, n in topics.items():
            try:
                done = {tp.partition: tp.offset for tp in committed[topic].result(self._timeout).topic_partitions}
                lag = 0
                for p in range(n):
                    tp = TopicPartition(topic, p)
                    low = earliest[tp].result(self._timeout).offset
                    high = latest[tp].result(self._timeout).offset
                    # Nothing committed yet: the mapping starts at the log start; records below it are gone anyway.
                    lag += max(0, high - max(done.get(p, -1), low))
                result[topic] = lag
            except (KafkaException, OSError) as e:
                log.info("lag of %s unknown: %s", topic, e)
                result[topic] = None
        return result

    def last_heartbeat(self, config: SrmConfig, source: str, target: str) -> int | None:
        policy = config.policy(source, target)
        remote = policy.format_remote_topic(source, policy.heartbeats_topic())
        newest = None
        for key, value, _ in self._tail(config, source, target, remote):
            try:
                beat = Heartbeat.decode(key, value)
            except FormatError:
                continue
            if beat.source_alias == source:
                newest = max(newest or 0, beat.timestamp)
        return newest

    def last_checkpoint(self, config: SrmConfig, source: str, target: str) -> int | None:
        topic = config.policy(source, target).checkpoints_topic(source)
        stamps = [timestamp for _, _, timestamp in self._tail(config, source, target, topic)]
        return max(stamps) if stamps else None

    def _tail(
        self, config: SrmConfig, source: str, target: str, topic: str, last: int = 20
    ) -> list[tuple[bytes | None, bytes | None, int]]:
        """The last records of every partition of a topic on the target (none when it does not exist)."""
        info = self.topics(config, target).get(topic)
        if info is None:
            return []
        conf = consumer_config(config, target, (source, target), group_id="srm-control-status", resolver=self._resolver)
        conf.update(self._QUIET)
        consumer = build(Consumer, conf, config, target, "consumer")
        out: list[tuple[bytes | None, bytes | None, int]] = []
        try:
            ends: dict[int, int] = {}
            assignment = []
            for p in range(info.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self._timeout)
                if high > low:
                    ends[p] = high
                    assignment.append(TopicPartition(topic, p, max(low, high - last)))
            if not assignment:
                return out
            consumer.assign(assignment)
            deadline = time.monotonic() + self._timeout
            while ends and time.monotonic() < deadline:
                for m in consumer.consume(500, timeout=0.5):
                    if m.error() is None:
                        out.append((m.key(), m.value(), m.timestamp()[1]))
                    if m.offset() is not None and m.offset() + 1 >= ends.get(m.partition(), 0):
                        ends.pop(m.partition(), None)
                positions = consumer.position([TopicPartition(topic, p) for p in ends])
                for tp in positions:
                    if tp.offset >= ends.get(tp.partition, 0):
                        ends.pop(tp.partition, None)
        finally:
            consumer.close()
        return out
