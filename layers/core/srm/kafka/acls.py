"""Topic ACL sync (``sync.topic.acls.enabled``): MM2's conversion rules, plus removal of what the source removed.

Which source bindings are synced, and how (MM2's ``MirrorSourceConnector.targetAclBinding``):

* only ``TOPIC`` resources with a ``LITERAL`` pattern, on topics the flow replicates (prefixed patterns and other
  resource types are never synced);
* ``ALLOW WRITE`` is not synced: only replication writes to remote topics;
* ``ALLOW ALL`` becomes ``ALLOW READ`` on the remote topic; every other binding (``DENY`` ones included) is copied
  as is, principal and host unchanged, onto the remote topic's name.

Better than MM2: a binding srm created on the target and that no longer follows from the source (removed there, or
its topic stopped matching the conversion) is deleted on the target. Only bindings srm created are ever deleted
(the state table's topic mappings remember them), so ACLs managed on the target itself are left alone. A topic that
stops being replicated keeps its remote topic's ACLs.

A cluster without an authorizer answers ``SECURITY_DISABLED``: that is logged once per cluster (per container) and
the rest of the topic sync carries on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from srm.core.said import Said

__all__ = [
    "AclChanges",
    "AclSyncResult",
    "TopicAcls",
    "acl_changes",
    "acl_key",
    "binding_from_key",
    "target_acl_binding",
    "target_acl_bindings",
]

log = logging.getLogger(__name__)
_said = Said()  # per container: what a target refuses, said when it starts or changes

_ANY: Any = None  # a filter field that matches anything (the stubs type these fields as str)
_ANY_TOPIC = AclBindingFilter(
    ResourceType.TOPIC, _ANY, ResourcePatternType.ANY, _ANY, _ANY, AclOperation.ANY, AclPermissionType.ANY
)
_LITERAL_TOPICS = AclBindingFilter(
    ResourceType.TOPIC, _ANY, ResourcePatternType.LITERAL, _ANY, _ANY, AclOperation.ANY, AclPermissionType.ANY
)


# -- conversion (pure) ------------------------------------------------------------------------------------------
def target_acl_binding(binding: AclBinding, remote_topic: str) -> AclBinding | None:
    """The binding to hold on ``remote_topic`` for a source binding, or None when it is not synced."""
    if binding.restype != ResourceType.TOPIC or binding.resource_pattern_type != ResourcePatternType.LITERAL:
        return None
    allow = binding.permission_type == AclPermissionType.ALLOW
    if allow and binding.operation == AclOperation.WRITE:
        return None
    operation = AclOperation.READ if allow and binding.operation == AclOperation.ALL else binding.operation
    return AclBinding(
        ResourceType.TOPIC,
        remote_topic,
        ResourcePatternType.LITERAL,
        binding.principal,
        binding.host,
        operation,
        binding.permission_type,
    )


def target_acl_bindings(bindings: Iterable[AclBinding], remote_topics: Mapping[str, str]) -> dict[str, set[str]]:
    """Source bindings → wanted target bindings, as keys (:func:`acl_key`) per *source* topic.

    ``remote_topics`` maps each replicated source topic to its remote topic; bindings of other topics are ignored."""
    wanted: dict[str, set[str]] = {}
    for binding in bindings:
        remote = remote_topics.get(binding.name)
        if remote is None:
            continue
        converted = target_acl_binding(binding, remote)
        if converted is not None:
            wanted.setdefault(binding.name, set()).add(acl_key(converted))
    return wanted


def acl_key(binding: AclBinding) -> str:
    """A literal topic binding as a stable string: ``<topic>|<principal>|<host>|<OPERATION>|<PERMISSION>``."""
    operation, permission = binding.operation, binding.permission_type
    return "|".join(
        (
            binding.name,
            binding.principal,
            binding.host,
            operation.name if isinstance(operation, AclOperation) else str(operation),
            permission.name if isinstance(permission, AclPermissionType) else str(permission),
        )
    )


def binding_from_key(key: str) -> AclBinding:
    topic, rest = key.split("|", 1)  # topic names have no "|"; a principal might
    principal, host, operation, permission = rest.rsplit("|", 3)
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        host,
        AclOperation[operation],
        AclPermissionType[permission],
    )


@dataclass(frozen=True)
class AclChanges:
    create: frozenset[str]
    delete: frozenset[str]


def acl_changes(wanted: set[str], present: set[str], synced_before: set[str]) -> AclChanges:
    """Create what is wanted and missing; delete what srm synced before, no longer wants, and is still there."""
    return AclChanges(frozenset(wanted - present), frozenset((synced_before - wanted) & present))


# -- sync (I/O) -------------------------------------------------------------------------------------------------
@dataclass
class AclSyncResult:
    synced: dict[str, set[str]] = field(default_factory=dict)  # source topic → binding keys srm holds on target
    created: int = 0
    deleted: int = 0
    skipped: str | None = None  # why nothing was synced (no authorizer)


class TopicAcls:
    """ACL sync of one flow; remembers (per container) which clusters have no authorizer, to say so once."""

    def __init__(self) -> None:
        self._no_authorizer: set[str] = set()
        self._lock = threading.Lock()

    def sync(
        self,
        source: str,
        target: str,
        source_admin: AdminClient,
        target_admin: AdminClient,
        remote_topics: Mapping[str, str],
        synced_before: Mapping[str, set[str]],
        timeout: float = 30.0,
    ) -> AclSyncResult:
        """Make the target's bindings on ``remote_topics`` (source topic → remote topic) follow the source's."""
        source_bindings = self._describe(source, source_admin, _ANY_TOPIC, timeout)
        if source_bindings is None:
            return AclSyncResult(dict(synced_before), skipped=f"no authorizer on {source}")
        wanted = target_acl_bindings(source_bindings, remote_topics)
        if not wanted and not any(synced_before.values()):
            return AclSyncResult({})  # nothing to hold on the target: no call to it
        present_bindings = self._describe(target, target_admin, _LITERAL_TOPICS, timeout)
        if present_bindings is None:
            return AclSyncResult(dict(synced_before), skipped=f"no authorizer on {target}")
        present = {acl_key(b) for b in present_bindings}
        before = {k for keys in synced_before.values() for k in keys}
        changes = acl_changes({k for keys in wanted.values() for k in keys}, present, before)
        failed = set()
        if changes.create:
            failed |= self._create(target, target_admin, changes.create, timeout)
        if changes.delete:
            self._delete(target, target_admin, changes.delete, timeout)
        result = AclSyncResult(
            {t: keys - failed for t, keys in wanted.items() if keys - failed},
            created=len(changes.create - failed),
            deleted=len(changes.delete),
        )
        if failed and self._disabled(target):
            result.skipped = f"no authorizer on {target}"
        if result.created or result.deleted:
            log.info("%s->%s: topic ACLs: %d created, %d deleted", source, target, result.created, result.deleted)
        return result

    # -- admin calls --------------------------------------------------------------------------------------------
    def _describe(
        self, alias: str, admin: AdminClient, acl_filter: AclBindingFilter, timeout: float
    ) -> list[AclBinding] | None:
        try:
            return list(admin.describe_acls(acl_filter, request_timeout=timeout).result(timeout))
        except KafkaException as e:
            if self._security_disabled(alias, e):
                return None
            raise

    def _create(self, alias: str, admin: AdminClient, keys: Iterable[str], timeout: float) -> set[str]:
        """Create bindings; the keys that could not be created (logged)."""
        by_key = {k: binding_from_key(k) for k in keys}
        failed = set()
        futures = admin.create_acls(list(by_key.values()), request_timeout=timeout)
        for key, binding in by_key.items():
            try:
                futures[binding].result(timeout)
            except KafkaException as e:
                failed.add(key)
                # a binding the target refuses is tried at every sync: said when it starts or changes
                if not self._security_disabled(alias, e):
                    _said.say(
                        (alias, key),
                        str(e.args[0]),
                        log.warning,
                        "cannot create ACL %s on %s: %s",
                        key,
                        alias,
                        e.args[0],
                    )
            else:
                _said.ended((alias, key))
        return failed

    def _delete(self, alias: str, admin: AdminClient, keys: Iterable[str], timeout: float) -> None:
        filters = []
        for key in keys:
            b = binding_from_key(key)
            filters.append(
                AclBindingFilter(
                    b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
                )
            )
        for acl_filter, future in admin.delete_acls(filters, request_timeout=timeout).items():
            try:
                future.result(timeout)
            except KafkaException as e:
                if not self._security_disabled(alias, e):
                    _said.say(
                        (alias, str(acl_filter)),
                        str(e.args[0]),
                        log.warning,
                        "cannot delete ACL %s on %s: %s",
                        acl_filter,
                        alias,
                        e.args[0],
                    )

    def _security_disabled(self, alias: str, e: KafkaException) -> bool:
        err = e.args[0] if e.args else None
        if not isinstance(err, KafkaError) or err.code() != KafkaError.SECURITY_DISABLED:
            return False
        with self._lock:
            first = alias not in self._no_authorizer
            self._no_authorizer.add(alias)
        if first:
            log.info(
                "cluster %s has no ACL authorizer (SECURITY_DISABLED): topic ACLs are not synced; set "
                "sync.topic.acls.enabled=false to stop trying",
                alias,
            )
        return True

    def _disabled(self, alias: str) -> bool:
        with self._lock:
            return alias in self._no_authorizer
