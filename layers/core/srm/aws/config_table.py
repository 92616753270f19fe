"""The config table (DynamoDB): the live configuration every function reads through a short cache.

This module alone knows the item layout. Keys: ``id`` (S) = ``config`` and ``sk`` (S) = the scope:

==========================  ===================================================================================
sk                          value (JSON object of the scope's properties, keys without the scope prefix)
==========================  ===================================================================================
``global``                  unprefixed properties (``clusters``, ``replication.factor``…)
``cluster#<alias>``         ``<alias>.``-prefixed properties (``bootstrap.servers``…)
``flow#<source>-><target>`` ``<source>-><target>.``-prefixed properties (``enabled``, ``topics``…)
==========================  ===================================================================================

Every item also carries ``version`` (N, 1 for a new scope, +1 per write), ``updated_at`` (S, ISO-8601 UTC) and
``updated_by`` (S, who wrote it).

It is the DynamoDB adapter of the configuration's port (:mod:`srm.config.store`, whose promises it keeps): a commit
is one DynamoDB transaction, conditional on the version of every scope it read (and on the absence of scopes it
creates); larger than DynamoDB's 100 items per transaction, it is written in several (each still conditional on what
it replaces).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import boto3
from aws_lambda_powertools.utilities.parameters import DynamoDBProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from srm.aws.state_table import create_table
from srm.config.scopes import ConfigSnapshot, Scope, flatten_scopes
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError, ConfigStoreError, ReplaceAll
from srm.errors import ConfigError

__all__ = ["DynamoDBConfig", "create_config_table"]

log = logging.getLogger(__name__)

_PARTITION = "config"
_MAX_TRANSACTION_ITEMS = 100  # DynamoDB's limit per TransactWriteItems


class DynamoDBConfig(ReplaceAll):
    """The configuration in the config table (see the module docstring)."""

    def __init__(self, client: Any, table: str, cache_seconds: float = 10.0) -> None:
        self._db = client
        self.table = table
        self.cache_seconds = cache_seconds
        # Powertools' provider wants a resource; build it on the same endpoint and region as the client.
        resource = boto3.resource(
            "dynamodb", region_name=client.meta.region_name, endpoint_url=client.meta.endpoint_url
        )
        self._provider = DynamoDBProvider(
            table_name=table, key_attr="id", sort_attr="sk", value_attr="value", boto3_client=resource
        )
        self._parsed: tuple[dict[str, Any], SrmConfig] | None = None

    # -- reading -------------------------------------------------------------------------------------------------
    def load(self, *, fresh: bool = False) -> SrmConfig:
        """The current configuration, validated; served from a cache at most ``cache_seconds`` old."""
        try:
            scopes: dict[str, Any] = self._provider.get_multiple(  # type: ignore[assignment]
                _PARTITION, max_age=int(self.cache_seconds), transform="json", force_fetch=fresh
            )
        except GetParameterError as e:  # Powertools' wrapper of the boto3 error raised while it was handled
            cause = e.__cause__ or e.__context__
            raise self._store_error("read", cause if isinstance(cause, Exception) else e) from None
        if not scopes:
            raise ConfigError(
                f"config table {self.table} is empty: import a configuration first (srm-control config import FILE)"
            )
        # Validating is not free: parse again only when the table's content changed.
        if self._parsed is None or self._parsed[0] != scopes:
            self._parsed = (scopes, SrmConfig.from_properties(flatten_scopes(f"dynamodb:{self.table}", scopes)))
        return self._parsed[1]

    def read(self) -> ConfigSnapshot:
        """Every scope with its version, read consistently (the base of a read-modify-write)."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "id = :id",
            "ExpressionAttributeValues": {":id": {"S": _PARTITION}},
            "ConsistentRead": True,
        }
        while True:
            page = self._call("read", self._db.query, **kwargs)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        scopes = {}
        for i in items:
            sk = i["sk"]["S"]
            scopes[sk] = Scope(
                sk,
                json.loads(i["value"]["S"]),
                int(i.get("version", {"N": "0"})["N"]),
                i.get("updated_at", {}).get("S"),
                i.get("updated_by", {}).get("S"),
            )
        return ConfigSnapshot(self.table, scopes)

    # -- writing -------------------------------------------------------------------------------------------------
    def commit(
        self,
        base: ConfigSnapshot,
        changes: Mapping[str, Mapping[str, str] | None],
        *,
        author: str | None = None,
    ) -> None:
        if not changes:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        writes: list[tuple[str, dict[str, Any]]] = []
        for sk, values in sorted(changes.items()):
            old = base.scope(sk)
            key = {"id": {"S": _PARTITION}, "sk": {"S": sk}}
            if old.version == 0:
                condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(sk)"}
            else:
                condition = {
                    "ConditionExpression": "version = :v",
                    "ExpressionAttributeValues": {":v": {"N": str(old.version)}},
                }
            if values is None:
                if old.version == 0:
                    continue  # nothing stored to delete
                writes.append((sk, {"Delete": {"TableName": self.table, "Key": key, **condition}}))
                continue
            item = {
                **key,
                "value": {"S": json.dumps(dict(values), sort_keys=True)},
                "version": {"N": str(old.version + 1)},
                "updated_at": {"S": now},
                "updated_by": {"S": author or "unknown"},
            }
            writes.append((sk, {"Put": {"TableName": self.table, "Item": item, **condition}}))
        checks = [
            (
                sk,
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": {"id": {"S": _PARTITION}, "sk": {"S": sk}},
                        "ConditionExpression": "version = :v",
                        "ExpressionAttributeValues": {":v": {"N": str(scope.version)}},
                    }
                },
            )
            for sk, scope in sorted(base.scopes.items())
            if sk not in changes
        ]
        if len(writes) + len(checks) <= _MAX_TRANSACTION_ITEMS:
            self._transact(writes + checks)
            return
        log.warning(
            "%d scope changes exceed one DynamoDB transaction (%d items): writing them in several",
            len(writes),
            _MAX_TRANSACTION_ITEMS,
        )
        for i in range(0, len(writes), _MAX_TRANSACTION_ITEMS):
            self._transact(writes[i : i + _MAX_TRANSACTION_ITEMS])

    def _transact(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if not items:
            return
        try:
            self._db.transact_write_items(TransactItems=[request for _, request in items])
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code == "TransactionCanceledException":
                reasons = e.response.get("CancellationReasons") or []
                failed = tuple(
                    sk
                    for (sk, _), reason in zip(items, reasons, strict=False)
                    if (reason or {}).get("Code") in ("ConditionalCheckFailed", "TransactionConflict")
                )
                if failed or not reasons:
                    raise ConfigConflictError(failed) from None
            raise self._store_error("write", e) from None
        except BotoCoreError as e:
            raise self._store_error("write", e) from None

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError) as e:
            raise self._store_error(what, e) from None

    def _store_error(self, what: str, e: Exception) -> ConfigStoreError:
        where = f" at {self._db.meta.endpoint_url}"
        if isinstance(e, ClientError):
            code = e.response.get("Error", {}).get("Code")
            if code == "ResourceNotFoundException":
                return ConfigStoreError(f"config table {self.table} does not exist{where}", missing_table=True)
            message = e.response.get("Error", {}).get("Message") or code
            return ConfigStoreError(f"cannot {what} config table {self.table}{where}: {message}")
        fix = (
            " (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            if isinstance(e, NoCredentialsError)
            else ""
        )
        return ConfigStoreError(f"cannot {what} config table {self.table}{where}: {e}{fix}")


def create_config_table(client: Any, table: str) -> None:
    """Create the config table if missing (the local runtime; on AWS template.yaml defines it)."""
    create_table(client, table, "id", "sk")
