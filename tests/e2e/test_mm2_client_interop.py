"""MirrorMaker 2's own client (``MirrorClient``, ``RemoteClusterUtils`` from Kafka's connect-mirror-client jar)
reads what `srm run` writes — heartbeats, checkpoints, remote topic names — and answers what srm's Python client
and `srm-control offsets` answer.

The Java side is tests/interop/Mm2ClientProbe.java, compiled once per session against Kafka's jars. Each test gives
its clusters aliases of its own, so the shared clusters' other heartbeats and checkpoints never mix in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from srm.local.kafka import libs_dir
from srm.mm2 import client as mm2_client
from srm.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy
from tests.e2e.test_failover import FAST, consume_and_commit, produce_values
from tests.support.kafka import create_topic, list_topic_names, unique, wait_for, wait_replicated
from tests.support.runtime import SrmRun, run_cli, write_config

pytestmark = pytest.mark.e2e

PROBE_SOURCE = Path(__file__).resolve().parents[1] / "interop" / "Mm2ClientProbe.java"
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
POLICIES: dict[str, ReplicationPolicy] = {
    "default": DefaultReplicationPolicy(),
    "identity": IdentityReplicationPolicy(),
}

Offsets = dict[tuple[str, int], int]


@pytest.fixture(scope="session")
def mm2_probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The class path of the compiled probe plus Kafka's jars."""
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail("javac is not on PATH: the MM2 client interop tests compile tests/interop/Mm2ClientProbe.java")
    classes = tmp_path_factory.mktemp("mm2-probe")
    jars = f"{libs_dir()}/*"
    built = subprocess.run(
        [javac, "-cp", jars, "-d", str(classes), str(PROBE_SOURCE)], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, f"javac failed:\n{built.stdout}{built.stderr}"
    return f"{classes}:{jars}"


def mm2_answers(classpath: str, bootstrap: str, policy: str, source: str, groups: list[str]) -> dict[str, Any]:
    """What MM2's MirrorClient / RemoteClusterUtils answer about the cluster at ``bootstrap``."""
    java = shutil.which("java")
    assert java is not None, "java is not on PATH"
    done = subprocess.run(
        [java, "-Dlog4j2.level=OFF", "-cp", classpath, "Mm2ClientProbe", bootstrap, policy, source, *groups],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"Mm2ClientProbe failed:\n{done.stdout}{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def mm2_offsets(rows: list[list[Any]]) -> Offsets:
    return {(topic, partition): offset for topic, partition, offset in rows}


def python_offsets(translated: dict[TopicPartition, int]) -> Offsets:
    return {(tp.topic, tp.partition): offset for tp, offset in translated.items()}


def control_offsets(cwd: Path, source: str, target: str, group: str) -> Offsets:
    """`srm-control offsets --export`: topic,partition,offset lines."""
    shown = run_cli(
        "srm-control",
        "--local",
        "offsets",
        "--source",
        source,
        "--target",
        target,
        "--group",
        group,
        "--export",
        cwd=cwd,
    )
    assert shown.returncode == 0, shown.stderr
    rows = [line.split(",") for line in shown.stdout.splitlines()]
    return {(topic, int(partition)): int(offset) for topic, partition, offset in rows}


def checkpointed(bootstrap: str, source: str, groups: dict[str, Offsets], policy: ReplicationPolicy) -> bool:
    """True once srm's client reads every group's expected offsets from the checkpoints on ``bootstrap``."""
    config = {"bootstrap.servers": bootstrap}
    try:
        return all(
            python_offsets(mm2_client.translate_offsets(config, source, group, policy=policy)) == want
            for group, want in groups.items()
        )
    except LookupError:
        return False  # no checkpoints topic yet


def ours(names: set[str] | list[str], aliases: set[str]) -> set[str]:
    """The topics named after this test's aliases only, out of a shared cluster's: every segment before the last is
    one of them (heartbeats topics are always replicated, so a shared cluster's ``b.heartbeats`` of another test
    arrives here as ``<A>.b.heartbeats``). The test's own topic names hold no dot; ``checkpoints.internal`` one."""
    found = set()
    for name in names:
        base = "checkpoints.internal" if name.endswith(".checkpoints.internal") else name.rsplit(".", 1)[-1]
        hops = name[: -len(base)].rstrip(".").split(".")
        if hops != [""] and all(hop in aliases for hop in hops):
            found.add(name)
    return found


def assert_same_answers(
    mm2: dict[str, Any], bootstrap: str, policy: str, source: str, aliases: set[str], groups: dict[str, Offsets]
) -> None:
    """MM2's answers (filtered to ``aliases``) equal srm's Python client's, and the groups' offsets are ``groups``."""
    config = {"bootstrap.servers": bootstrap}
    reader = mm2_client.MirrorClient(config, POLICIES[policy])
    assert set(mm2["upstreamClusters"]) & aliases == reader.upstream_clusters() & aliases
    for alias in aliases:
        assert mm2["replicationHops"].get(alias, -1) == reader.replication_hops(alias), alias
    assert ours(mm2["heartbeatTopics"], aliases) == ours(reader.heartbeat_topics(), aliases)
    assert ours(mm2["checkpointTopics"], aliases) == ours(reader.checkpoint_topics(), aliases)
    assert ours(mm2["remoteTopics"], aliases) == ours(reader.remote_topics(), aliases)
    assert ours(mm2["remoteTopicsOfSource"], aliases) == ours(reader.remote_topics(source), aliases)
    for group, want in groups.items():
        assert mm2_offsets(mm2["translateOffsets"][group]) == want, group
        assert mm2_offsets(mm2["remoteConsumerOffsets"][group]) == want, group
        assert python_offsets(mm2_client.translate_offsets(config, source, group, policy=POLICIES[policy])) == want


def test_mm2_client_reads_srm_default_policy_chain_like_srm_client_and_control(clusters, mm2_probe, tmp_path: Path):
    # GIVEN aliases of this test's own for clusters a, b, c; a topic on a with three groups committed at several
    # offsets (one on a single partition); flows A->B (topic and groups) and B->C (A's remote topic), default policy
    a, b, c = (clusters[n].bootstrap for n in "abc")
    A, B, C = unique("a"), unique("b"), unique("c")
    topic, prefix = unique("orders"), unique("app")
    create_topic(a, topic, 2)
    produce_values(a, topic, 0, [f"p0-{i}".encode() for i in range(40)])
    produce_values(a, topic, 1, [f"p1-{i}".encode() for i in range(40)])
    remote, two_hops = f"{A}.{topic}", f"{B}.{A}.{topic}"
    groups: dict[str, Offsets] = {}
    for name, how_many in {"early": {0: 12, 1: 30}, "done": {0: 40, 1: 40}, "one": {0: 7, 1: 0}}.items():
        group = f"{prefix}-{name}"
        consume_and_commit(a, group, topic, how_many)
        groups[group] = {(remote, p): n for p, n in how_many.items() if n}
    flows = {
        f"{A}->{B}": {"topics": topic, "groups": f"{prefix}-.*"},
        f"{B}->{C}": {"topics": remote, "groups": unique("none")},
    }
    config = write_config(tmp_path / "srm.yaml", {A: a, B: b, C: c}, flows, **FAST)

    # WHEN srm run replicates, emits heartbeats and checkpoints, and MM2's client reads b and c
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, remote)
        wait_replicated(b, remote, c, two_hops)
        wait_for(lambda: checkpointed(b, A, groups, POLICIES["default"]), 60, message="checkpoints of the groups")
        hearts = {f"{B}.heartbeats", f"{B}.{A}.heartbeats"}
        wait_for(lambda: hearts <= list_topic_names(c), 60, message=f"{hearts} on c")
        on_b = mm2_answers(mm2_probe, b, "default", A, list(groups))
        on_c = mm2_answers(mm2_probe, c, "default", B, [])
        control = {group: control_offsets(tmp_path, A, B, group) for group in groups}
        assert run.alive(), run.output()[-2000:]

    # THEN MM2 sees A one hop upstream of b, the heartbeats, checkpoints and remote topics srm wrote there
    aliases = {A, B, C}
    assert set(on_b["upstreamClusters"]) & aliases == {A}
    assert on_b["replicationHops"][A] == 1
    assert ours(on_b["heartbeatTopics"], aliases) == {f"{A}.heartbeats"}
    assert ours(on_b["checkpointTopics"], aliases) == {f"{A}.checkpoints.internal"}
    assert ours(on_b["remoteTopicsOfSource"], aliases) == {remote, f"{A}.heartbeats"}
    # AND on c, A two hops upstream through B, and B.A.<topic> a remote topic of B
    assert set(on_c["upstreamClusters"]) & aliases == {A, B}
    assert (on_c["replicationHops"][B], on_c["replicationHops"][A]) == (1, 2)
    assert ours(on_c["heartbeatTopics"], aliases) == hearts
    assert ours(on_c["remoteTopics"], aliases) == {two_hops} | hearts
    assert ours(on_c["remoteTopicsOfSource"], aliases) == {two_hops} | hearts
    # AND every answer is srm's Python client's; each group's offsets are exact, as srm-control offsets prints them
    assert_same_answers(on_b, b, "default", A, aliases, groups)
    assert_same_answers(on_c, c, "default", B, aliases, {})
    assert control == groups


def test_mm2_client_reads_srm_identity_policy_flow_like_srm_client_and_control(clusters, mm2_probe, tmp_path: Path):
    # GIVEN a topic on a with a group committed on it, and one flow A->B under IdentityReplicationPolicy
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    A, B = unique("ia"), unique("ib")
    topic, group = unique("ident"), unique("app")
    create_topic(a, topic, 1)
    produce_values(a, topic, 0, [f"v{i}".encode() for i in range(20)])
    consume_and_commit(a, group, topic, {0: 9})
    groups = {group: {(topic, 0): 9}}  # the remote topic keeps its name
    flows = {f"{A}->{B}": {"topics": topic, "groups": group}}
    config = write_config(tmp_path / "srm.yaml", {A: a, B: b}, flows, **FAST, **{"replication.policy.class": IDENTITY})

    # WHEN srm run replicates it and MM2's client, with the identity policy, reads b
    with SrmRun(config, tmp_path) as run:
        wait_replicated(a, topic, b, topic)
        wait_for(lambda: checkpointed(b, A, groups, POLICIES["identity"]), 60, message="checkpoints of the group")
        wait_for(lambda: f"{A}.heartbeats" in list_topic_names(b), 60, message=f"{A}.heartbeats on b")
        on_b = mm2_answers(mm2_probe, b, "identity", A, [group])
        control = control_offsets(tmp_path, A, B, group)
        assert run.alive(), run.output()[-2000:]

    # THEN heartbeats are still prefixed, so MM2 finds A one hop upstream; the checkpoints name the unprefixed topic
    aliases = {A, B}
    assert set(on_b["upstreamClusters"]) & aliases == {A}
    assert on_b["replicationHops"][A] == 1
    assert ours(on_b["heartbeatTopics"], aliases) == {f"{A}.heartbeats"}
    assert ours(on_b["checkpointTopics"], aliases) == {f"{A}.checkpoints.internal"}
    # (a client without source.cluster.alias cannot tell where an unprefixed topic came from: only heartbeats)
    assert ours(on_b["remoteTopicsOfSource"], aliases) == {f"{A}.heartbeats"}
    # AND every answer is srm's Python client's and srm-control offsets'
    assert_same_answers(on_b, b, "identity", A, aliases, groups)
    assert control == groups[group]
