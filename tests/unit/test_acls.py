"""srm.kafka.acls: MM2's topic ACL conversion rules, removal of what the source removed, and SECURITY_DISABLED.

Bindings are confluent_kafka's own ``AclBinding`` objects; the admin clients are fakes answering with futures, so
each rule and each answer a broker can give (SECURITY_DISABLED, other errors) is checked in milliseconds. The real
round trip — Apache Kafka with an authorizer on both sides, and a target without one — is tests/e2e/test_acl_sync.py."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from srm.kafka.acls import TopicAcls, acl_changes, acl_key, binding_from_key, target_acl_binding, target_acl_bindings

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(
    name: str = "orders",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    principal: str = "User:alice",
    host: str = "*",
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, operation, permission)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(binding(operation=AclOperation.READ), binding("a.orders"), id="allow-read-copied"),
        pytest.param(binding(operation=AclOperation.ALL), binding("a.orders"), id="allow-all-becomes-read"),
        pytest.param(binding(operation=AclOperation.WRITE), None, id="allow-write-not-synced"),
        pytest.param(
            binding(operation=AclOperation.DESCRIBE), binding("a.orders", AclOperation.DESCRIBE), id="describe-copied"
        ),
        pytest.param(
            binding(operation=AclOperation.WRITE, permission=DENY),
            binding("a.orders", AclOperation.WRITE, DENY),
            id="deny-write-copied",
        ),
        pytest.param(
            binding(operation=AclOperation.ALL, permission=DENY),
            binding("a.orders", AclOperation.ALL, DENY),
            id="deny-all-stays-all",
        ),
        pytest.param(binding(pattern=ResourcePatternType.PREFIXED), None, id="prefixed-not-synced"),
        pytest.param(binding(restype=ResourceType.GROUP), None, id="group-not-synced"),
    ],
)
def test_target_acl_binding_follows_mm2_rules(source: AclBinding, expected: AclBinding | None) -> None:
    assert target_acl_binding(source, "a.orders") == expected


def test_target_acl_binding_keeps_principal_and_host() -> None:
    converted = target_acl_binding(binding(principal="User:CN=svc,O=x", host="10.0.0.1"), "a.orders")
    assert converted is not None and (converted.principal, converted.host) == ("User:CN=svc,O=x", "10.0.0.1")


def test_target_acl_bindings_only_replicated_topics_keyed_by_source_topic() -> None:
    bindings = [binding("orders"), binding("secret"), binding("orders", AclOperation.WRITE)]
    assert target_acl_bindings(bindings, {"orders": "a.orders"}) == {"orders": {"a.orders|User:alice|*|READ|ALLOW"}}


def test_acl_key_round_trips_a_principal_with_bars() -> None:
    b = binding("a.orders", principal="User:odd|name", host="::1")
    assert binding_from_key(acl_key(b)) == b


def test_acl_changes_creates_missing_deletes_only_what_srm_synced_and_source_dropped() -> None:
    # GIVEN the source now wants {r}; the target holds r? no, it holds old (synced by srm) and mine (not srm's)
    changes = acl_changes(wanted={"r"}, present={"old", "mine"}, synced_before={"old", "gone-already"})
    # THEN r is created, old deleted, mine (never synced by srm) and gone-already (not present) untouched
    assert (changes.create, changes.delete) == ({"r"}, {"old"})


# -- sync with fake admin clients ----------------------------------------------------------------------------------
def done(value: Any = None, error: int | None = None) -> Future:
    future: Future = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(KafkaError(error)))
    return future


class FakeAdmin:
    def __init__(self, bindings: list[AclBinding] | None = None, error: int | None = None) -> None:
        self.bindings = list(bindings or [])
        self.error = error
        self.created: list[AclBinding] = []
        self.deleted: list[Any] = []

    def describe_acls(self, _filter: Any, **_: Any) -> Future:
        return done(list(self.bindings), self.error)

    def create_acls(self, bindings: list[AclBinding], **_: Any) -> dict[AclBinding, Future]:
        if self.error is None:
            self.created += bindings
            self.bindings += bindings
        return {b: done(None, self.error) for b in bindings}

    def delete_acls(self, filters: list[Any], **_: Any) -> dict[Any, Future]:
        self.deleted += filters
        names = {(f.name, f.principal, f.operation) for f in filters}
        self.bindings = [b for b in self.bindings if (b.name, b.principal, b.operation) not in names]
        return {f: done([]) for f in filters}


def test_topic_acls_sync_creates_then_removes_what_the_source_removed() -> None:
    # GIVEN ALLOW ALL for alice on the source topic
    source, target = (
        FakeAdmin([binding(operation=AclOperation.ALL)]),
        FakeAdmin([binding("a.orders", principal="User:ops")]),
    )
    acls = TopicAcls()
    first = acls.sync("a", "b", source, target, {"orders": "a.orders"}, {})
    # THEN alice may READ the remote topic; ops' own binding is untouched
    assert [acl_key(b) for b in target.created] == ["a.orders|User:alice|*|READ|ALLOW"]
    assert first.synced == {"orders": {"a.orders|User:alice|*|READ|ALLOW"}} and first.created == 1
    # WHEN the source binding is removed and sync runs again with what srm synced
    source.bindings = []
    second = acls.sync("a", "b", source, target, {"orders": "a.orders"}, first.synced)
    # THEN the binding srm created is deleted, ops' binding is kept
    assert second.deleted == 1 and second.synced == {}
    assert [acl_key(b) for b in target.bindings] == ["a.orders|User:ops|*|READ|ALLOW"]


def test_topic_acls_sync_in_step_makes_no_write() -> None:
    source = FakeAdmin([binding()])
    target = FakeAdmin([binding("a.orders")])
    result = TopicAcls().sync(
        "a", "b", source, target, {"orders": "a.orders"}, {"orders": {acl_key(binding("a.orders"))}}
    )
    assert (target.created, target.deleted, result.created, result.deleted) == ([], [], 0, 0)


@pytest.mark.parametrize("side", ["source", "target"])
def test_topic_acls_security_disabled_logged_once_per_cluster_and_sync_carries_on(
    side: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN one cluster answers SECURITY_DISABLED (no authorizer)
    disabled = FakeAdmin(error=KafkaError.SECURITY_DISABLED)
    source = disabled if side == "source" else FakeAdmin([binding()])
    target = disabled if side == "target" else FakeAdmin()
    acls = TopicAcls()
    # WHEN ACLs are synced three times
    with caplog.at_level(logging.INFO, logger="srm.kafka.acls"):
        results = [acls.sync("a", "b", source, target, {"orders": "a.orders"}, {}) for _ in range(3)]
    # THEN no error, each run says why it skipped, and the log says it once, naming the cluster
    alias = "a" if side == "source" else "b"
    assert all(r.skipped == f"no authorizer on {alias}" for r in results)
    said = [r.getMessage() for r in caplog.records if "SECURITY_DISABLED" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"cluster {alias} has no ACL authorizer")


def test_topic_acls_other_admin_errors_raise() -> None:
    source = FakeAdmin(error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        TopicAcls().sync("a", "b", source, FakeAdmin(), {"orders": "a.orders"}, {})
