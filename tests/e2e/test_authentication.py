"""Authentication and least privilege on real brokers: two clusters with a SASL_SSL listener (SCRAM-SHA-512) and an
mTLS listener (client certificates required), ACLs enforced by Kafka's StandardAuthorizer. srm's clients are set up
the MM2 way (Java client keys in an mm2.properties); the tests set up and check through PLAINTEXT, whose principal
(ANONYMOUS) is a super user, as is ``admin``. An mTLS principal is its certificate's CN
(``ssl.principal.mapping.rules``): ``CN=srm-source`` acts as ``User:srm-source``."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.kafka.admin import ensure_topic
from srm.kafka.clients import admin_config, consumer_config
from srm.local.clusters import Listener, LocalCluster
from srm.mm2.client import read_to_end
from srm.mm2.formats import Checkpoint, OffsetSync
from tests.e2e.test_failover import consume_and_commit, wait_group_synced
from tests.support.clusters import RUNNING
from tests.support.kafka import (
    admin,
    assert_identical,
    assert_no_loss,
    create_topic,
    numbered_records,
    produce,
    read_partition,
    read_topic,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import SrmRun, run_cli, wait_log, write_properties
from tests.support.tls import CertificateAuthority

pytestmark = pytest.mark.e2e

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
USERS = ("admin", "srm-source", "srm-target")
# Settings every run here shares: one broker per cluster, and every periodic function at its quickest.
FAST = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "refresh.topics.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    "emit.checkpoints.interval.seconds": "1",
    "sync.group.offsets.interval.seconds": "1",
    "event.source.batching.window.ms": "50",
}


@dataclass
class Secured:
    clusters: dict[str, LocalCluster]
    ca: CertificateAuthority  # the brokers' CA: it signs their certificate and every client certificate they trust
    rogue: CertificateAuthority  # a CA nobody trusts
    passwords: dict[str, str]  # SCRAM user → password

    def plain(self, alias: str) -> str:
        return self.clusters[alias].bootstrap

    def scram(self, alias: str, user: str, password: str | None = None, trust: Path | None = None) -> dict[str, str]:
        """Cluster settings for SASL_SSL with SCRAM-SHA-512, as a Java client's."""
        password = self.passwords[user] if password is None else password
        return {
            f"{alias}.bootstrap.servers": self.clusters[alias].listener_bootstrap("SASL_SSL"),
            f"{alias}.security.protocol": "SASL_SSL",
            f"{alias}.sasl.mechanism": "SCRAM-SHA-512",
            f"{alias}.sasl.jaas.config": f'{SCRAM_LOGIN} username="{user}" password="{password}";',
            f"{alias}.ssl.truststore.location": str(trust or self.ca.ca_file),
        }

    def mtls(self, alias: str, keystore: Path, trust: Path | None = None) -> dict[str, str]:
        """Cluster settings for mTLS with a PEM keystore (key and chain in one file), as a Java client's."""
        return {
            f"{alias}.bootstrap.servers": self.clusters[alias].listener_bootstrap("SSL"),
            f"{alias}.security.protocol": "SSL",
            f"{alias}.ssl.truststore.type": "PEM",
            f"{alias}.ssl.truststore.location": str(trust or self.ca.ca_file),
            f"{alias}.ssl.keystore.type": "PEM",
            f"{alias}.ssl.keystore.location": str(keystore),
            f"{alias}.ssl.key.password": self.ca.key_password,
        }

    @property
    def secrets(self) -> list[str]:
        return [*self.passwords.values(), self.ca.key_password]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    key_password = f"kp-{secrets.token_hex(8)}"
    ca = CertificateAuthority("srm-test", base / "pki", key_password)
    rogue = CertificateAuthority("rogue", base / "rogue", key_password)
    broker = ca.keystore("broker", server=True, encrypted=False)  # Java 17 reads no PBES2-encrypted PEM key
    passwords = {user: f"pw-{secrets.token_hex(8)}" for user in USERS}
    config = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_LOGIN};",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
    }
    clusters = {
        alias: LocalCluster(
            alias,
            base / alias / "data",
            config=config,
            listeners=[Listener("SASL_SSL", "SASL_SSL"), Listener("SSL", "SSL")],
            scram_users=passwords,
        )
        for alias in ("a", "b")
    }
    RUNNING.extend(clusters.values())  # their log tails go into a failing test's report
    try:
        with ThreadPoolExecutor(len(clusters)) as pool:
            for started in [pool.submit(c.start) for c in clusters.values()]:
                started.result()
        yield Secured(clusters, ca, rogue, passwords)
    finally:
        for cluster in clusters.values():
            cluster.stop(graceful=False)
            RUNNING.remove(cluster)


def assert_no_secret_written(secrets_: list[str], workdir: Path, outputs: list[str], config: Path) -> None:
    """No password or key password in what srm printed or in any file it wrote."""
    written = [p for p in workdir.rglob("*") if p.is_file() and p != config]
    for secret in secrets_:
        for text in outputs:
            assert secret not in text
        for path in written:
            assert secret.encode() not in path.read_bytes(), f"a secret in {path}"


# -- replication over SCRAM and mTLS -----------------------------------------------------------------------------
def test_scram_source_to_mtls_target_replicates_identically(secured: Secured, tmp_path: Path):
    # GIVEN records on a, and an mm2.properties reaching a over SCRAM and b with a client certificate (super users)
    a, b = secured.plain("a"), secured.plain("b")
    topic = unique("auth")
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(60, 2, topic))
    config = write_properties(
        tmp_path / "mm2.properties",
        {
            "clusters": "a, b",
            **secured.scram("a", "admin"),
            **secured.mtls("b", secured.ca.keystore("admin")),
            "a->b.enabled": "true",
            "a->b.topics": topic,
            "nodes.group.id": unique("srm-auth"),  # its state of its own (in Kafka, on b), not another test's
            **FAST,
        },
    )

    # WHEN srm check connects through both listeners
    check = run_cli("srm", "check", "--config", str(config), "--connect", cwd=tmp_path)

    # THEN both clusters answer, and the topic is one the flow would replicate
    assert check.returncode == 0, check.stdout + check.stderr
    assert "cluster a answers" in check.stdout and "cluster b answers" in check.stdout
    assert f"    {topic} → a.{topic}" in check.stdout

    # WHEN srm run replicates a->b
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, f"a.{topic}", timeout=60)
        assert run.alive(), run.output()[-2000:]

    # THEN every record arrived once, in order, with its key, headers and timestamp
    assert assert_identical(a, topic, b, f"a.{topic}") == {0: 30, 1: 30}
    assert_no_secret_written(secured.secrets, tmp_path, [check.stdout, check.stderr, run.output()], config)


# -- refused connections -----------------------------------------------------------------------------------------
REFUSALS = {
    # case: (the refused cluster, what the error says)
    "wrong-password": ("a", "SASL authentication error"),
    "untrusted-broker": ("b", "certificate verify failed"),
    "unknown-client-ca": ("b", "alert bad certificate"),
}


def refused_config(secured: Secured, case: str, wrong_password: str) -> dict[str, str]:
    a = secured.scram("a", "admin", password=wrong_password) if case == "wrong-password" else {}
    b = {}
    if case == "untrusted-broker":  # the client trusts another CA than the broker's
        b = secured.mtls("b", secured.ca.keystore("admin"), trust=secured.rogue.ca_file)
    elif case == "unknown-client-ca":  # the client's certificate is signed by a CA the broker does not trust
        b = secured.mtls("b", secured.rogue.keystore("admin"))
    return {
        "clusters": "a, b",
        **secured.scram("a", "admin"),
        **a,
        **secured.mtls("b", secured.ca.keystore("admin")),
        **b,
        "a->b.enabled": "true",
    }


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_connection_is_one_line_naming_the_cluster_and_the_cause(secured: Secured, tmp_path: Path, case: str):
    # GIVEN a configuration one cluster refuses: a wrong password, or a certificate one side does not trust
    refused, cause = REFUSALS[case]
    other = "b" if refused == "a" else "a"
    wrong_password = f"wrong-{secrets.token_hex(8)}"
    config = write_properties(tmp_path / "mm2.properties", refused_config(secured, case, wrong_password))

    # WHEN srm check connects
    check = run_cli("srm", "check", "--config", str(config), "--connect", "--timeout", "20", cwd=tmp_path)

    # THEN it says at once (not after the timeout) that the cluster refuses, and why, in one line; exit status 1
    assert check.returncode == 1, check.stdout + check.stderr
    assert "Traceback" not in check.stderr
    refusals = [line for line in check.stdout.splitlines() if "refuses" in line]
    assert len(refusals) == 1 and refusals[0].startswith(f"cluster {refused} refuses the connection: ")
    assert cause in refusals[0], refusals[0]
    assert f"cluster {other} answers" in check.stdout

    # WHEN srm run is started with it
    run = run_cli("srm", "run", "--config", str(config), "--no-metrics", cwd=tmp_path, timeout=60)

    # THEN it stops before starting anything, with one line naming the cluster and the cause; exit status 1
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(f"srm: cluster {refused} refuses the connection: ")
    assert cause in run.stderr
    # AND no password (the wrong one included) nor the key password is in anything srm printed or wrote
    outputs = [check.stdout, check.stderr, run.stdout, run.stderr]
    assert_no_secret_written([*secured.secrets, wrong_password], tmp_path, outputs, config)


# -- least privilege ---------------------------------------------------------------------------------------------
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
TXN = ResourceType.TRANSACTIONAL_ID
Op = AclOperation
Grant = tuple[ResourceType, str, bool, tuple[AclOperation, ...]]  # resource type, name, prefixed, operations


def guide_acls(s: str, t: str) -> dict[str, dict[str, list[Grant]]]:
    """infra/README.md, "Kafka ACLs for a SCRAM or mTLS user", row by row (without exactly-once), with the offset
    syncs on the target (``offset-syncs.topic.location = target``) and the state of `srm run` there: by function,
    then cluster."""
    return {
        "event source mappings": {
            s: [
                (TOPIC, "*", False, (Op.DESCRIBE, Op.READ)),
                (GROUP, f"srm-mirror.{s}-{t}.", True, (Op.DESCRIBE, Op.READ)),
                (CLUSTER, "kafka-cluster", False, (Op.DESCRIBE_CONFIGS,)),
            ]
        },
        "mirror": {
            s: [(TOPIC, "*", False, (Op.DESCRIBE, Op.DESCRIBE_CONFIGS))],
            t: [
                (TOPIC, f"{s}.", True, (Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.CREATE, Op.WRITE)),
                (TOPIC, f"mm2-offset-syncs.{s}.internal", False, (Op.DESCRIBE, Op.CREATE, Op.WRITE)),
            ],
        },
        "topic sync": {
            s: [
                (TOPIC, "*", False, (Op.DESCRIBE, Op.DESCRIBE_CONFIGS)),
                (CLUSTER, "kafka-cluster", False, (Op.DESCRIBE,)),
            ],
            t: [
                (TOPIC, f"{s}.", True, (Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.CREATE, Op.ALTER, Op.ALTER_CONFIGS)),
                (TOPIC, "srm-metrics-api.internal", False, (Op.DESCRIBE, Op.CREATE, Op.WRITE)),
                (CLUSTER, "kafka-cluster", False, (Op.ALTER,)),
                (TOPIC, f"mm2-offsets.{s}.internal", False, (Op.DESCRIBE, Op.READ)),
                (TOPIC, f"mm2-offset-syncs.{s}.internal", False, (Op.READ,)),
            ],
        },
        "checkpoint": {
            s: [
                (GROUP, "*", False, (Op.DESCRIBE,)),
                (TOPIC, "*", False, (Op.DESCRIBE, Op.READ)),
                (GROUP, "srm-checkpoint-probe", False, (Op.READ,)),
            ],
            t: [
                (TOPIC, f"{s}.checkpoints.internal", False, (Op.DESCRIBE, Op.CREATE, Op.WRITE)),
                (TOPIC, f"{s}.", True, (Op.DESCRIBE, Op.READ)),
                (GROUP, "*", False, (Op.DESCRIBE, Op.READ)),
            ],
        },
        "heartbeat": {s: [(TOPIC, "heartbeats", False, (Op.DESCRIBE, Op.CREATE, Op.WRITE))]},
        "srm run's nodes": {
            t: [
                *[
                    (TOPIC, prefix, True, (Op.DESCRIBE, Op.CREATE, Op.READ, Op.WRITE))
                    for prefix in ("srm-store.", "srm-state.", "srm-metrics.", "srm-nodes.")
                ],
                (GROUP, "srm-leader.", True, (Op.DESCRIBE, Op.READ)),
                (TXN, "srm-store-", True, (Op.DESCRIBE, Op.WRITE)),
                (TXN, "srm-state.", True, (Op.DESCRIBE, Op.WRITE)),  # a partition's or a leader's state writes
            ]
        },
        "metrics API": {
            alias: [
                (TOPIC, "srm-metrics-api.internal", False, (Op.DESCRIBE, Op.READ)),
                (GROUP, "srm-metrics-api-discovery", False, (Op.READ,)),
            ]
            for alias in (s, t)
        },
    }


def bindings(principal: str, grants: list[Grant]) -> list[AclBinding]:
    return [
        AclBinding(
            restype,
            name,
            ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for restype, name, prefixed, operations in grants
        for operation in operations
    ]


def create_acls(bootstrap: str, acls: list[AclBinding]) -> None:
    for future in admin(bootstrap).create_acls(list(set(acls)), request_timeout=30).values():
        future.result(30)


def delete_acl(bootstrap: str, acl: AclBinding) -> None:
    acl_filter = AclBindingFilter(
        acl.restype, acl.name, acl.resource_pattern_type, acl.principal, acl.host, acl.operation, acl.permission_type
    )
    deleted = admin(bootstrap).delete_acls([acl_filter], request_timeout=30)[acl_filter].result(30)
    assert deleted, f"no ACL {acl}"


def topic_acls(bootstrap: str, topic: str) -> set[tuple[str, str]]:
    acl_filter = AclBindingFilter(
        TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    bindings = admin(bootstrap).describe_acls(acl_filter, request_timeout=30).result(30)
    return {(b.principal, b.operation.name) for b in bindings}


def records_of(bootstrap: str, topic: str) -> list:
    return read_partition(bootstrap, topic, 0, isolation="read_uncommitted")


def test_least_privilege_users_replicate_and_a_missing_acl_is_named(secured: Secured, tmp_path: Path):
    # GIVEN srm-source on a (its client certificate) and srm-target on b (SCRAM) holding exactly the guide's ACLs
    a, b = secured.plain("a"), secured.plain("b")
    acls = guide_acls("a", "b")
    source_grants = [g for rows in acls.values() for g in rows.get("a", [])]
    create_acls(a, bindings("User:srm-source", source_grants))
    create_acls(b, bindings("User:srm-target", [g for rows in acls.values() for g in rows.get("b", [])]))
    # (on a, srm-source only reads, but for the heartbeats it emits there)
    writes = {(name, op) for _, name, _, ops in source_grants for op in ops if op in (Op.WRITE, Op.CREATE, Op.ALTER)}
    assert writes == {("heartbeats", Op.WRITE), ("heartbeats", Op.CREATE)}
    # AND a topic with records, a consumer group's committed offsets, and an ACL that topic sync copies
    p = unique("lp")
    topic, group, remote = f"{p}.orders", f"{p}.billing", f"a.{p}.orders"
    create_topic(a, topic, 2)
    produce(a, topic, numbered_records(100, 2, topic))
    consume_and_commit(a, group, topic, {0: 20, 1: 30})
    create_acls(a, bindings("User:reader", [(TOPIC, topic, False, (Op.READ, Op.DESCRIBE))]))
    heartbeats_before = len(read_topic(a, "heartbeats").get(0, []))  # earlier tests' flow emitted some
    keystore = secured.ca.keystore("srm-source")
    config = write_properties(
        tmp_path / "mm2.properties",
        {
            "clusters": "a, b",
            # librdkafka's names for the key and certificate files, the truststore's type told by its name
            "a.bootstrap.servers": secured.clusters["a"].listener_bootstrap("SSL"),
            "a.security.protocol": "SSL",
            "a.ssl.truststore.location": str(secured.ca.ca_file),
            "a.ssl.certificate.location": str(keystore),
            "a.ssl.key.location": str(keystore),
            "a.ssl.key.password": secured.ca.key_password,
            **secured.scram("b", "srm-target"),
            "a->b.enabled": "true",
            "a->b.topics": f"{p}\\\\..*",
            "a->b.groups": f"{p}\\\\..*",
            "offset-syncs.topic.location": "target",
            "nodes.group.id": unique("srm-auth"),  # its state of its own (in Kafka, on b), not another test's
            **FAST,
        },
    )

    # WHEN srm run replicates with them
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, remote, timeout=60)
        # THEN the group is checkpointed and synced, offset syncs reach the target, heartbeats flow both ways of the
        # flow, and the topic's ACL follows to the remote topic
        assert wait_group_synced(b, group, remote, 2) == {0: 20, 1: 30}
        wait_for(
            lambda: any(
                Checkpoint.decode(r.key, r.value).group == group for r in records_of(b, "a.checkpoints.internal")
            ),
            30,
            message=f"checkpoints of {group}",
        )
        syncs = [OffsetSync.decode(r.key, r.value) for r in records_of(b, "mm2-offset-syncs.a.internal")]
        assert {s.partition for s in syncs if s.topic == topic} == {0, 1}
        wait_for(lambda: len(records_of(a, "heartbeats")) > heartbeats_before, 30, message="heartbeats on a")
        wait_for(lambda: records_of(b, "a.heartbeats"), 30, message="heartbeats replicated to b")
        wait_for(lambda: ("User:reader", "READ") in topic_acls(b, remote), 30, message=f"READ ACL on {remote}")
        assert "authorization failed" not in run.output().lower(), run.output()[-3000:]

        # WHEN srm-target loses WRITE on the remote topics while records keep coming
        write = bindings("User:srm-target", [(TOPIC, "a.", True, (Op.WRITE,))])[0]
        delete_acl(b, write)
        produce(a, topic, numbered_records(50, 2, topic, start=100))

        # THEN the failure names the remote topic, Kafka's refusal and the operation srm's user needs
        wait_log(run, f"Topic authorization failed (b's ACLs must allow srm's user WRITE on topic {remote})")

        # WHEN the ACL is back
        create_acls(b, [write])

        # THEN replication resumes where it stopped: nothing is lost
        wait_replicated(a, topic, b, remote, timeout=60)
    source, target = read_topic(a, topic), read_topic(b, remote)
    for partition in (0, 1):
        assert_no_loss(source[partition], target[partition])
    assert_no_secret_written(secured.secrets, tmp_path, [run.output()], config)


def test_internal_topic_created_beforehand_needs_no_create_acl(secured: Secured):
    # GIVEN a compacted topic created beforehand, which srm-source may describe and write but not create
    a = secured.plain("a")
    topic = f"{unique('pre')}.internal"
    create_topic(a, topic, 1, {"cleanup.policy": "compact"})
    create_acls(a, bindings("User:srm-source", [(TOPIC, topic, False, (Op.DESCRIBE, Op.WRITE))]))
    config = SrmConfig.from_properties(Properties.of({"clusters": "a", **secured.scram("a", "srm-source")}))
    admin = AdminClient(admin_config(config, "a"))

    # WHEN srm makes sure it exists, as it does with its internal topics, THEN it is there
    assert ensure_topic(admin, topic, 1, 1, {"cleanup.policy": "compact"}) is False

    # AND a topic that is not there still needs CREATE
    with pytest.raises(KafkaException) as refused:
        ensure_topic(admin, f"{unique('missing')}.internal", 1, 1)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_denied_read_of_an_internal_topic_fails_at_once_naming_the_denial(secured: Secured):
    # GIVEN a topic with records that srm-target may describe but not read on a (where no test grants it more)
    a = secured.plain("a")
    topic = f"{unique('denied')}.internal"
    create_topic(a, topic, 1)
    produce(a, topic, numbered_records(3, 1, "denied"))
    create_acls(a, bindings("User:srm-target", [(TOPIC, topic, False, (Op.DESCRIBE,))]))
    config = SrmConfig.from_properties(Properties.of({"clusters": "a", **secured.scram("a", "srm-target")}))
    consumer = Consumer(consumer_config(config, "a", None, group_id=unique("denied-reader")))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert high == 3

        # WHEN srm reads it as it reads its internal topics, THEN the read fails with the denial, long before it
        # would have timed out (120 s)
        with pytest.raises(KafkaException) as denied:
            list(read_to_end(consumer, {(topic, 0): (low, high)}, 120))
    finally:
        consumer.close()
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
