"""The use cases of ``srm-control``: change what is replicated while it runs, and see how replication is doing.

Every change is a read-modify-write of the config table (:mod:`srm.aws.config_table`): read a snapshot, compute the
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
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from srm.config.export import format_properties, format_yaml
from srm.config.parsing import Properties
from srm.config.scopes import ConfigSnapshot, scope_key
from srm.config.secrets import mask_secrets
from srm.config.settings import SrmConfig, resolve
from srm.config.store import ConfigStore, ConfigStoreError
from srm.control.status import FlowStatus, StatusProbe, flow_status
from srm.core.filters import (
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    FilterError,
    PatternList,
    format_list,
    parse_list,
)
from srm.errors import PermanentError
from srm.flow import Flow
from srm.state import StateStore

__all__ = [
    "Control",
    "ControlError",
    "FilterChange",
    "FilterEdit",
    "FilterView",
    "FlowChange",
    "FlowInfo",
    "ImportResult",
    "PatternSetting",
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


class ControlError(PermanentError, ValueError):
    """The operator's request cannot be applied as asked; nothing was written."""


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
        if self.defined_by == f"{Flow(source, target)!s}.{self.key}":
            return "set on the flow"
        return f"inherited from {self.defined_by}"

    def value(self) -> str:
        return format_list(self.patterns)


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
    transforms: tuple[str, ...] = ()  # the flow's Single Message Transforms, a line per stage in order

    @property
    def name(self) -> str:
        return str(Flow(self.source, self.target))


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
        flow = str(Flow(source, target))
        notes: list[str] = []
        include = _edit_list(flow, before.include, edit.add, edit.remove, notes, replace_default=True)
        exclude = _edit_list(flow, before.exclude, edit.add_exclude, edit.remove_exclude, notes, replace_default=False)
        _explain_additions(config, source, target, kind, edit.add, exclude, notes)
        updates = {
            setting.key: format_list(patterns)
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
        flows: Sequence[Flow] | None = None,
        base: ConfigSnapshot | None = None,
    ) -> list[FlowStatus]:
        """Each flow's state as the state table and the clusters tell it; what cannot be asked is reported per flow
        (see :func:`srm.control.status.flow_status`)."""
        config = self.config(base)
        for flow in flows or ():
            _check_flow(config, *flow)
        return [flow_status(config, probe, state, s, t) for s, t in (flows or config.flows)]

    # -- plumbing -----------------------------------------------------------------------------------------------
    def _write_flow(
        self, base: ConfigSnapshot, config: SrmConfig, source: str, target: str, updates: Mapping[str, str]
    ) -> SrmConfig:
        """Validate the whole configuration with ``updates`` on the flow, then write the flow's scope conditionally."""
        props = Properties(dict(config.properties.data), dict(config.properties.origins), config.properties.source)
        prefix = str(Flow(source, target)) + "."
        for key, value in updates.items():
            props.set(prefix + key, value, "this change")
        new_config = SrmConfig.from_properties(props)  # ConfigError names the key; nothing written
        sk = scope_key(flow=Flow(source, target))
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
        raise ControlError(f"{Flow(source, target)!s}: a flow needs two different clusters")
    if Flow(source, target) not in config.flows:
        known = ", ".join(str(Flow(*f)) for f in config.flows) or "none"
        raise ControlError(
            f"flow {Flow(source, target)!s} does not exist (flows: {known}); define it in the configuration "
            f"({Flow(source, target)!s}.enabled = true) and import it with srm-control config import"
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
    flow = str(Flow(source, target))
    policy = config.policy(source, target)
    for pattern in adds:
        denied = _matching(exclude, pattern)
        if denied is not None:
            notes.append(f"'{pattern}' is also matched by {flow} {kind}.exclude ('{denied}'): it stays excluded")
        elif kind == "topics" and _NAME_LIKE.match(pattern) and policy.is_internal_topic(pattern):
            notes.append(f"'{pattern}' is an internal topic name: internal topics are never replicated")


def _flow_info(config: SrmConfig, base: ConfigSnapshot, source: str, target: str) -> FlowInfo:
    scope = base.scope(scope_key(flow=Flow(source, target)))
    return FlowInfo(
        source,
        target,
        config.settings(source, target).enabled,
        _setting(config.properties, "topics", source, target),
        _setting(config.properties, "groups", source, target),
        scope.version,
        scope.updated_at,
        scope.updated_by,
        tuple(config.transforms(source, target).describe()),
    )
