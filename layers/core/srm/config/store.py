"""The live configuration's port: where every function reads the configuration (through a short cache) and where
``srm run`` and ``srm-control`` change it. Two adapters: the config table on AWS (:mod:`srm.aws.config_table`) and
``srm run``'s state topic (:mod:`srm.kafka.config_store`).

The configuration is stored by scopes (:mod:`srm.config.scopes`), each with a version. Every adapter keeps these
promises:

A. Writers read a :class:`ConfigSnapshot`, validate the whole resulting property map, then :meth:`ConfigStore.commit`
   their changes, on condition that no scope they read changed and no scope they create appeared meanwhile. So a
   change is validated against exactly the configuration it lands on, and two operators cannot lose each other's
   edits: the later write fails with :class:`ConfigConflictError` and nothing of it is written.
B. Secret values are never stored: only references such as ``${env:NAME}`` or ``${secretsmanager:id}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from srm.config.parsing import Properties
from srm.config.scopes import ConfigSnapshot, Scope, split_scopes
from srm.config.secrets import is_plain_secret
from srm.config.settings import SrmConfig
from srm.errors import ConfigError, RetriableError, SrmError

__all__ = ["ConfigConflictError", "ConfigStore", "ConfigStoreError", "ReplaceAll", "check_no_secrets", "plan_replace"]


class ConfigConflictError(RetriableError, RuntimeError):
    """Someone else changed the same configuration since it was read; nothing of this write was stored."""

    def __init__(self, scopes: tuple[str, ...]) -> None:
        names = ", ".join(Scope(sk, {}).label for sk in scopes) or "the configuration"
        super().__init__(
            f"{names} changed since it was read (someone else wrote it meanwhile); nothing was written: "
            "run the command again to apply it to the current configuration"
        )
        self.scopes = scopes


class ConfigStoreError(SrmError, RuntimeError):
    """The configuration's store cannot be reached, read or written (not a problem of the configuration itself)."""

    def __init__(self, message: str, *, missing_table: bool = False) -> None:
        super().__init__(message)
        self.missing_table = missing_table


def check_no_secrets(props: Properties) -> None:
    """Secrets belong in Secrets Manager or the environment; the store holds only references to them."""
    for key, value in props.items():
        if is_plain_secret(key, value):
            raise ConfigError(
                f"{key}: the config table never stores secrets; put the value in Secrets Manager or an environment "
                f"variable and write {key}=${{secretsmanager:<secret-id>}} or {key}=${{env:<NAME>}}",
                key=key,
                origin=props.origin(key),
            )


def plan_replace(config: SrmConfig, base: ConfigSnapshot) -> dict[str, dict[str, str] | None]:
    """The scope changes that make the store hold exactly ``config`` (None: delete the scope)."""
    check_no_secrets(config.properties)
    wanted = split_scopes(config.properties, config.clusters)
    changes: dict[str, dict[str, str] | None] = {
        sk: values for sk, values in wanted.items() if sk not in base.scopes or base.scope(sk).properties != values
    }
    changes.update({sk: None for sk in base.scopes if sk not in wanted})
    return changes


class ConfigStore(Protocol):
    """The live configuration (see the module docstring); errors of the store itself are :class:`ConfigStoreError`."""

    table: str  # the store's name, as messages give it

    def load(self, *, fresh: bool = False) -> SrmConfig:
        """The current configuration, validated; from a cache a few seconds old unless ``fresh``."""

    def read(self) -> ConfigSnapshot:
        """Every scope with its version, as current as the store can say (the base of a read-modify-write)."""

    def plan_replace(self, config: SrmConfig, base: ConfigSnapshot) -> dict[str, dict[str, str] | None]: ...

    def replace_all(
        self, config: SrmConfig, *, base: ConfigSnapshot | None = None, author: str | None = None
    ) -> dict[str, dict[str, str] | None]:
        """Make the store hold exactly this (already validated) configuration; returns the changes written."""

    def commit(
        self, base: ConfigSnapshot, changes: Mapping[str, Mapping[str, str] | None], *, author: str | None = None
    ) -> None:
        """Write ``changes`` (scope → its new properties, None to delete it) all or nothing, on condition that no
        scope of ``base`` changed and no scope created here appeared meanwhile (promise A)."""


class ReplaceAll:
    """Replacing the whole configuration in terms of an adapter's own ``read`` and ``commit``: the same for every
    adapter, so each inherits it."""

    def read(self) -> ConfigSnapshot:
        raise NotImplementedError

    def commit(
        self, base: ConfigSnapshot, changes: Mapping[str, Mapping[str, str] | None], *, author: str | None = None
    ) -> None:
        raise NotImplementedError

    def plan_replace(self, config: SrmConfig, base: ConfigSnapshot) -> dict[str, dict[str, str] | None]:
        return plan_replace(config, base)

    def replace_all(
        self, config: SrmConfig, *, base: ConfigSnapshot | None = None, author: str | None = None
    ) -> dict[str, dict[str, str] | None]:
        base = self.read() if base is None else base
        changes = self.plan_replace(config, base)
        self.commit(base, changes, author=author)
        return changes
