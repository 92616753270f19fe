"""The config table (DynamoDB): the live configuration every function reads through a short cache.

This module alone knows the item layout. Keys: ``id`` (S) = ``config`` and ``sk`` (S) = the scope:

==========================  ===================================================================================
sk                          value (JSON object of the scope's properties, keys without the scope prefix)
==========================  ===================================================================================
``global``                  unprefixed properties (``clusters``, ``replication.factor``…)
``cluster#<alias>``         ``<alias>.``-prefixed properties (``bootstrap.servers``…)
``flow#<source>-><target>`` ``<source>-><target>.``-prefixed properties (``enabled``, ``topics``…)
==========================  ===================================================================================

Each item carries ``version`` (N); writers put conditionally on the version they read, so two operators cannot
silently lose each other's edits. Secret values are never stored: only references such as ``${env:NAME}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from aws_lambda_powertools.utilities.parameters import DynamoDBProvider
from botocore.exceptions import ClientError

from srm.config import ConfigError, Properties, SrmConfig, _is_sensitive
from srm.state import _create_table

__all__ = ["ConfigConflictError", "ConfigStore", "Scope", "create_config_table", "split_scopes"]

_PARTITION = "config"
_FLOW_KEY = re.compile(r"^(?P<flow>[^\s.,>]+?->[^\s.,>]+?)\.(?P<key>.+)$")
_REF = re.compile(r"^\$\{[a-zA-Z]+:[^}]*\}$")


class ConfigConflictError(RuntimeError):
    """Someone else changed the same part of the configuration since it was read."""


@dataclass(frozen=True)
class Scope:
    sk: str
    properties: dict[str, str]
    version: int = 0

    @property
    def prefix(self) -> str:
        if self.sk == "global":
            return ""
        return self.sk.split("#", 1)[1] + "."


def split_scopes(props: Mapping[str, str], clusters: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Partition a flat property map into the table's scopes (the inverse of :meth:`ConfigStore.properties`)."""
    scopes: dict[str, dict[str, str]] = {"global": {}}
    for key, value in props.items():
        m = _FLOW_KEY.match(key)
        head, _, rest = key.partition(".")
        if m:
            scopes.setdefault(f"flow#{m['flow']}", {})[m["key"]] = value
        elif head in clusters and rest:
            scopes.setdefault(f"cluster#{head}", {})[rest] = value
        else:
            scopes["global"][key] = value
    return scopes


def check_no_secrets(props: Properties) -> None:
    """Secrets belong in Secrets Manager or the environment; the table holds only references to them."""
    for key, value in props.items():
        if _is_sensitive(key) and value and not _REF.match(value.strip()):
            raise ConfigError(
                f"{key}: the config table never stores secrets; put the value in Secrets Manager or an environment "
                f"variable and write {key}=${{secretsmanager:<secret-id>}} or {key}=${{env:<NAME>}}",
                key=key,
                origin=props.origin(key),
            )


class ConfigStore:
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
        scopes = self._provider.get_multiple(
            _PARTITION, max_age=int(self.cache_seconds), transform="json", force_fetch=fresh
        )
        if not scopes:
            raise ConfigError(
                f"config table {self.table} is empty: import a configuration first (srm-control config import FILE)"
            )
        # Validating is not free: parse again only when the table's content changed.
        if self._parsed is None or self._parsed[0] != scopes:
            self._parsed = (scopes, SrmConfig.from_properties(self._flatten(scopes)))
        return self._parsed[1]

    def scopes(self) -> dict[str, Scope]:
        """Every scope with its version, read consistently (for read-modify-write)."""
        try:
            items = self._db.query(
                TableName=self.table,
                KeyConditionExpression="id = :id",
                ExpressionAttributeValues={":id": {"S": _PARTITION}},
                ConsistentRead=True,
            )["Items"]
        except ClientError as e:
            raise ConfigError(f"cannot read config table {self.table}: {e.response['Error']['Message']}") from None
        return {
            i["sk"]["S"]: Scope(i["sk"]["S"], json.loads(i["value"]["S"]), int(i.get("version", {"N": "0"})["N"]))
            for i in items
        }

    def properties(self) -> Properties:
        return self._flatten({sk: s.properties for sk, s in self.scopes().items()})

    def _flatten(self, scopes: Mapping[str, Mapping[str, str]]) -> Properties:
        props = Properties(source=f"dynamodb:{self.table}")
        for sk, values in sorted(scopes.items()):
            prefix = "" if sk == "global" else sk.split("#", 1)[1] + "."
            for key, value in values.items():
                props.set(prefix + key, value, f"dynamodb:{self.table}#{sk}")
        return props

    # -- writing -------------------------------------------------------------------------------------------------
    def replace_all(self, config: SrmConfig) -> None:
        """Make the table hold exactly this (already validated) configuration."""
        check_no_secrets(config.properties)
        wanted = split_scopes(config.properties, config.clusters)
        current = self.scopes()
        for sk, values in wanted.items():
            old = current.get(sk)
            if old is None or old.properties != values:
                self.put_scope(Scope(sk, values, old.version if old else 0))
        for sk, old in current.items():
            if sk not in wanted:
                self.delete_scope(old)

    def put_scope(self, scope: Scope) -> None:
        """Write one scope if its version is still the one read; raises ConfigConflictError otherwise."""
        item = {
            "id": {"S": _PARTITION},
            "sk": {"S": scope.sk},
            "value": {"S": json.dumps(scope.properties, sort_keys=True)},
            "version": {"N": str(scope.version + 1)},
        }
        condition = "attribute_not_exists(sk)" if scope.version == 0 else "version = :v"
        values = {} if scope.version == 0 else {"ExpressionAttributeValues": {":v": {"N": str(scope.version)}}}
        try:
            self._db.put_item(TableName=self.table, Item=item, ConditionExpression=condition, **values)
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ConfigConflictError(
                    f"{scope.sk} was changed by someone else since it was read; run the command again"
                ) from None
            raise ConfigError(f"cannot write config table {self.table}: {e.response['Error']['Message']}") from None

    def delete_scope(self, scope: Scope) -> None:
        try:
            self._db.delete_item(
                TableName=self.table,
                Key={"id": {"S": _PARTITION}, "sk": {"S": scope.sk}},
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": {"N": str(scope.version)}},
            )
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ConfigConflictError(f"{scope.sk} was changed by someone else since it was read") from None
            raise


def create_config_table(client: Any, table: str) -> None:
    """Create the config table if missing (the local runtime; on AWS template.yaml defines it)."""
    _create_table(client, table, "id", "sk")
