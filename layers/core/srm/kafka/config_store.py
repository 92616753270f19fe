"""The live configuration (:class:`srm.config.store.ConfigStore`) in ``srm run``'s state topic, beside the state
(:class:`srm.kafka.state.KafkaState`): one record per scope, key ``["config", scope]``, value
``{"p": the scope's properties, "v": version, "at": when (ISO-8601 UTC), "by": who wrote it}``.

Reads are served from memory, which follows the log as it is written; a fresh read (``load(fresh=True)``,
``read()``) first catches up with it (everything written before it was asked is read). A commit is conditional, as
a DynamoDB transaction is, and the broker makes it so: the writer claims the configuration's transactional id (which
fences any other writer and aborts what it left open), reads everything committed before, checks the versions it
read against that, and writes its changes in one transaction of that id. A writer that claimed it meanwhile makes
this one's transaction fail: nothing of it lands, and the command is told to run again
(:class:`~srm.config.store.ConfigConflictError`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from srm.config.scopes import ConfigSnapshot, Scope, flatten_scopes
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError, ConfigStoreError, ReplaceAll
from srm.errors import ConfigError
from srm.kafka.state import KafkaState
from srm.state.records import StateError, StateFencedError

__all__ = ["KafkaConfig"]

_OWNER = "config"  # the transactional id's suffix of every configuration writer


class KafkaConfig(ReplaceAll):
    """The configuration kept in ``state``'s log (see the module docstring)."""

    def __init__(self, state: KafkaState, cache_seconds: float = 10.0) -> None:
        self._state = state
        self.table = state.log.topic
        # Memory follows the log as it is written (milliseconds behind): a load is never staler than the cache a
        # DynamoDB reader keeps, whatever ``cache_seconds`` says, and only a fresh one asks the broker first.
        self.cache_seconds = cache_seconds
        self._parsed: tuple[dict[str, Any], SrmConfig] | None = None

    def _values(self, fresh: bool) -> dict[str, Any]:
        if fresh:
            self._state.catch_up()
        return dict(self._state.items("config"))

    def load(self, *, fresh: bool = False) -> SrmConfig:
        scopes = {sk: value["p"] for sk, value in self._values(fresh).items()}
        if not scopes:
            raise ConfigError(
                f"no configuration in {self.table}: import one first (srm-control --local config import FILE), or "
                "start srm run with it"
            )
        # Validating is not free: parse again only when the configuration changed.
        if self._parsed is None or self._parsed[0] != scopes:
            self._parsed = (scopes, SrmConfig.from_properties(flatten_scopes(f"kafka:{self.table}", scopes)))
        return self._parsed[1]

    def read(self) -> ConfigSnapshot:
        scopes = {
            sk: Scope(sk, dict(v["p"]), int(v["v"]), v.get("at"), v.get("by")) for sk, v in self._values(True).items()
        }
        return ConfigSnapshot(self.table, scopes, origin=f"kafka:{self.table}")

    def commit(
        self, base: ConfigSnapshot, changes: Mapping[str, Mapping[str, str] | None], *, author: str | None = None
    ) -> None:
        if not changes:
            return
        log = self._state.log
        try:
            log.claim([_OWNER])  # fences every other writer; what they committed is read before it returns
            try:
                current = {sk: int(v["v"]) for sk, v in self._state.items("config")}
                changed = tuple(sk for sk, scope in sorted(base.scopes.items()) if current.get(sk) != scope.version)
                appeared = tuple(sk for sk in sorted(changes) if sk not in base.scopes and sk in current)
                if changed or appeared:
                    raise ConfigConflictError(changed + appeared)
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                records = [
                    (
                        ("config", sk),
                        None
                        if values is None
                        else {"p": dict(values), "v": base.scope(sk).version + 1, "at": now, "by": author or "unknown"},
                    )
                    for sk, values in sorted(changes.items())
                    if values is not None or sk in current
                ]
                log.write(records, _OWNER)
            finally:
                log.release([_OWNER])
        except StateFencedError:  # another writer claimed the configuration meanwhile: nothing of this landed
            raise ConfigConflictError(tuple(sorted(changes))) from None
        except StateError as e:
            raise ConfigStoreError(f"cannot write the configuration to {self.table}: {e}") from None
