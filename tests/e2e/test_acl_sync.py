"""Topic ACL sync through `srm run`, on Apache Kafka with the StandardAuthorizer: the source's bindings reach the
remote topic by MirrorMaker 2's rules, a binding removed on the source is removed on the target, bindings made on
the target by others are left alone; a target without an authorizer is reported once and replication goes on.

The clusters' PLAINTEXT clients are ``User:ANONYMOUS``, a super user: srm and the test may do anything, and the
bindings under test name other principals."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from srm.local.clusters import LocalCluster
from tests.support.clusters import RUNNING, using_external_clusters
from tests.support.kafka import admin, create_topic, numbered_records, produce, unique, wait_for, wait_replicated
from tests.support.runtime import srm_run, wait_log

pytestmark = pytest.mark.e2e

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
READ, WRITE, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.ALL
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
EVERY_BINDING = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)

ACL_SYNC = {"sync.topic.acls.interval.seconds": 1}

Acl = tuple[str, str, str, str, str, str, str]  # resource type, name, pattern, principal, host, operation, permission


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two 1-node clusters with an authorizer, ``source`` and ``target`` → bootstrap; SIGKILLed afterwards."""
    if using_external_clusters():
        pytest.skip("needs clusters this suite starts (SRM_TEST_BOOTSTRAP_* is set)")
    base = tmp_path_factory.mktemp("secured")
    nodes = [LocalCluster(alias, base / alias / "data", config=AUTHORIZER) for alias in ("source", "target")]
    RUNNING.extend(nodes)  # their logs go into a failing test's report
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:  # the JVMs start side by side
            for started in [pool.submit(node.start) for node in nodes]:
                started.result()
        yield {node.alias: node.bootstrap for node in nodes}
    finally:
        for node in nodes:
            node.stop(graceful=False)
            RUNNING.remove(node)


def binding(
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    restype: ResourceType = TOPIC,
    pattern: ResourcePatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, host, operation, permission)


def acl(b: AclBinding) -> Acl:
    return (
        b.restype.name,
        b.name,
        b.resource_pattern_type.name,
        b.principal,
        b.host,
        b.operation.name,
        b.permission_type.name,
    )


def create_acls(bootstrap: str, bindings: list[AclBinding]) -> None:
    client = admin(bootstrap)  # the client must outlive its futures
    for future in client.create_acls(bindings, request_timeout=30).values():
        future.result(30)


def delete_acls(bootstrap: str, bindings: list[AclBinding]) -> None:
    filters = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )
        for b in bindings
    ]
    client = admin(bootstrap)
    for future in client.delete_acls(filters, request_timeout=30).values():
        future.result(30)


def acls(bootstrap: str) -> set[Acl]:
    """Every binding of the cluster."""
    client = admin(bootstrap)  # the client must outlive its future
    return {acl(b) for b in client.describe_acls(EVERY_BINDING, request_timeout=10).result(30)}


def test_topic_acls_follow_mm2s_rules_and_bindings_removed_on_the_source_go(secured, tmp_path: Path):
    # GIVEN a replicated topic with bindings of every kind on the source, and one made on the target by its admins
    source, target = secured["source"], secured["target"]
    p = unique("acl")
    topic, remote, excluded = f"{p}.orders", f"a.{p}.orders", f"{p}-excluded"
    create_topic(source, topic)
    allow_read = binding(topic, "User:alice", READ)
    allow_all = binding(topic, "User:bob", ALL)
    deny_read = binding(topic, "User:mallory", READ, DENY, host="10.0.0.7")
    create_acls(
        source,
        [
            allow_read,
            allow_all,
            deny_read,
            binding(topic, "User:carol", WRITE),  # only replication writes remote topics
            binding(f"{p}.", "User:dave", READ, pattern=PREFIXED),  # prefixed patterns are not synced
            binding(f"{p}-group", "User:alice", READ, restype=GROUP),  # nor other resource types
            binding(excluded, "User:alice", READ),  # nor topics the flow does not replicate
        ],
    )
    theirs = binding(remote, "User:erin", READ)
    create_acls(target, [theirs])
    flows = {"a->b": {"topics": f"{p}\\..*"}}

    with srm_run(tmp_path, {"a": source, "b": target}, flows, **ACL_SYNC) as run:
        # WHEN srm run syncs the topic's ACLs
        # THEN the target holds the LITERAL topic bindings of the replicated topic on the remote topic, principal and
        # host kept, ALLOW ALL as ALLOW READ, DENY as is, ALLOW WRITE not; and the target's own binding
        synced = {
            ("TOPIC", remote, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            ("TOPIC", remote, "LITERAL", "User:bob", "*", "READ", "ALLOW"),
            ("TOPIC", remote, "LITERAL", "User:mallory", "10.0.0.7", "READ", "DENY"),
        }
        want = synced | {acl(theirs)}
        wait_for(lambda: acls(target) == want, timeout=30, message=f"the target's bindings {want}")

        # WHEN alice's READ and bob's ALL are removed on the source
        delete_acls(source, [allow_read, allow_all])

        # THEN the bindings srm made from them are removed on the target; the DENY and the target's own stay
        want = {("TOPIC", remote, "LITERAL", "User:mallory", "10.0.0.7", "READ", "DENY"), acl(theirs)}
        wait_for(lambda: acls(target) == want, timeout=30, message=f"the target's bindings {want}")
        time.sleep(2)  # two more ACL syncs change nothing
        assert acls(target) == want
        assert run.alive(), run.output()[-2000:]


def test_target_without_authorizer_reported_once_and_replication_goes_on(secured, clusters, tmp_path: Path):
    # GIVEN a replicated topic with records and an ALLOW ALL binding on the source, a target without an authorizer
    source, target = secured["source"], clusters["b"].bootstrap
    p = unique("noauth")
    topic, remote = f"{p}.orders", f"a.{p}.orders"
    create_topic(source, topic, 2)
    create_acls(source, [binding(topic, "User:alice", ALL)])
    produce(source, topic, numbered_records(40, 2, topic))
    flows = {"a->b": {"topics": f"{p}\\..*"}}
    settings = {**ACL_SYNC, "heartbeats.replication.enabled": False}

    # WHEN srm run replicates the topic, ACL sync on, for several ACL sync intervals
    with srm_run(tmp_path, {"a": source, "b": target}, flows, **settings) as run:
        wait_log(run, "cluster b has no ACL authorizer (SECURITY_DISABLED)", timeout=60)
        wait_replicated(source, topic, target, remote, timeout=60)
        produce(source, topic, numbered_records(40, 2, topic, start=40))
        time.sleep(3)

        # THEN the records, those written after the refusal too, are replicated
        wait_replicated(source, topic, target, remote, timeout=30)
        # AND the missing authorizer is logged once, naming the target, and topic sync never failed
        assert run.alive(), run.output()[-2000:]
        output = run.output()
    said = [line for line in output.splitlines() if "SECURITY_DISABLED" in line]
    # once per container: once per worker process started (a restart, should one happen, says it again; the lines
    # around it are printed in full so that its cause shows)
    started = [line for line in output.splitlines() if "starting worker" in line]
    why = [line for line in output.splitlines() if any(w in line for w in ("worker", "lead", "WARNING", "ERROR"))]
    assert said and len(said) == len(started), "\n".join(said + why)
    assert all("cluster b has no ACL authorizer" in line for line in said), said
    assert "cannot create ACL" not in output and "topic-sync failed" not in output, output[-2000:]
