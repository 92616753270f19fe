"""The nodes of an srm run cluster in the state table (srm.aws.nodes, srm.local.nodes, srm.control.nodes) and their
settings (srm.config.nodes): a node id in use elsewhere is refused, a crashed earlier start is not; status says who
is alive, leads and holds what."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from srm.aws.nodes import DynamoDBNodes
from srm.config.nodes import NodeSettings
from srm.config.parsing import Properties
from srm.control.nodes import nodes_status
from srm.errors import ConfigError
from srm.flow import Flow
from srm.local.nodes import (
    NodeFiles,
    NodeIdInUseError,
    NodePresence,
    check_node_id,
    default_node_id,
    locate_store,
)
from srm.state.nodes import NODE_EXPIRY_MS, MemberRecord, NodeRecord


@pytest.fixture
def nodes(state) -> DynamoDBNodes:
    return DynamoDBNodes(state._db, state.table, "srm-a-b")


def record(node_id: str, *, host: str = "other-host", run_dir: str = "/srv/srm", seen_ago_ms: int = 0) -> NodeRecord:
    now = int(time.time() * 1000)
    return NodeRecord(node_id, host, 4120, run_dir, "token", now - 60_000, now - seen_ago_ms)


def test_a_node_id_running_elsewhere_is_refused_naming_it(nodes: DynamoDBNodes, tmp_path: Path) -> None:
    # GIVEN a live node "twin" on another host
    nodes.put_node(record("twin"))
    # WHEN this node claims the same id THEN it is refused, naming the other's process, host and directory
    with pytest.raises(NodeIdInUseError, match=r"node id twin is in use by a running node: pid 4120 on other-host in "):
        NodePresence(nodes, "twin", tmp_path).claim()


def test_a_crashed_start_here_or_an_expired_node_is_no_obstacle(nodes: DynamoDBNodes, tmp_path: Path) -> None:
    # GIVEN this node's own earlier start (same host and directory) and another node long gone
    presence = NodePresence(nodes, "me", tmp_path)
    nodes.put_node(record("me", host=presence.record.host, run_dir=presence.record.run_dir))
    nodes.put_node(record("gone", seen_ago_ms=NODE_EXPIRY_MS + 1))
    # WHEN they start again THEN they claim their ids, and a clean stop removes the item
    presence.claim()
    revived = NodePresence(nodes, "gone", tmp_path / "elsewhere")
    revived.claim()
    assert nodes.nodes()["me"].token == presence.record.token
    assert nodes.nodes()["gone"].token == revived.record.token
    presence.leave()
    revived.leave()  # its heartbeat thread must not outlive the test's moto tables
    assert "me" not in nodes.nodes()


def test_status_lists_live_nodes_first_with_what_they_lead_and_hold(nodes: DynamoDBNodes) -> None:
    now = int(time.time() * 1000)
    nodes.put_node(record("n1"))
    nodes.put_node(record("n2"))
    nodes.put_node(record("dead", seen_ago_ms=NODE_EXPIRY_MS * 2))
    nodes.put_member(MemberRecord("n1", "a", "b", True, {"orders": (0, 1)}, now - 1000, now))
    nodes.put_member(MemberRecord("n2", "a", "b", False, {"orders": (2,)}, now - 2000, now))
    nodes.put_member(MemberRecord("dead", "a", "b", True, {"orders": (3,)}, now - 9000, now - NODE_EXPIRY_MS * 2))

    status = nodes_status(nodes, [Flow("a", "b")], now)

    assert [(n.node_id, n.alive, n.leads, dict(n.partitions)) for n in status.nodes] == [
        ("n1", True, ("a->b",), {"a->b": {"orders": (0, 1)}}),
        ("n2", True, (), {"a->b": {"orders": (2,)}}),
        ("dead", False, (), {}),  # its members' partitions moved with its sessions
    ]
    assert status.leaders == {"a->b": "n1"}


def test_node_settings_defaults_and_bad_values() -> None:
    props = Properties.of({"clusters": "b, a"})
    default = NodeSettings.of(props, ("b", "a"))
    assert (default.group_id, default.store_cluster, default.session_timeout_ms) == ("srm-a-b", None, 10_000)
    assert default.topic == "srm-state.srm-a-b.internal"
    assert default.default_store_cluster([Flow("b", "c"), Flow("a", "b")]) == "b"
    many = NodeSettings.of(props, tuple(f"c{i}" for i in range(100)))
    assert many.group_id.startswith("srm-") and len(many.group_id) == 20  # a digest: a topic name stays short
    for key, value, message in (
        ("nodes.group.id", "a b", "not a valid name"),
        ("nodes.store.cluster", "z", "not one of the clusters"),
        ("nodes.session.timeout.ms", "1000", "expected milliseconds from 6000"),
    ):
        with pytest.raises(ConfigError, match=message):
            NodeSettings.of(Properties.of({"clusters": "a, b", key: value}), ("a", "b"))


def test_node_ids_and_where_the_state_is_found() -> None:
    assert default_node_id(Path("/srv/one/.srm-local")) == default_node_id(Path("/srv/one/.srm-local"))
    assert default_node_id(Path("/srv/one/.srm-local")) != default_node_id(Path("/srv/two/.srm-local"))
    with pytest.raises(ConfigError, match="not a valid node id"):
        check_node_id("has space")
    listing = {"a": {"srm-store.g.internal"}, "b": set()}

    def topics_of(alias: str) -> set[str]:
        if alias == "down":
            raise OSError("no answer")
        return listing[alias]

    assert locate_store("srm-store.g.internal", ["b", "down", "a"], topics_of) == ("a", ["b", "a"])
    # the state of the layout before the state topic is found by its store topic
    assert locate_store("srm-state.g.internal", ["b", "a"], topics_of, legacy="srm-store.g.internal") == (
        "a",
        ["b", "a"],
    )
    listing["b"] = {"srm-store.g.internal"}
    with pytest.raises(ConfigError, match="exists on clusters b, a"):
        locate_store("srm-store.g.internal", ["b", "a"], topics_of)


def test_a_nodes_own_records_noted_in_its_directory_read_back_whole(tmp_path: Path) -> None:
    """What srm-control --local status shows of the node while the shared state cannot be read."""
    files = NodeFiles(tmp_path / "nodes", "g")
    node = NodeRecord("n1", "host", 42, "/srv/one", "tok", 1_000, 2_000)
    member = MemberRecord("n1#2", "a", "b", True, {"t": (0, 2)}, 1_500, 2_000, "", '{"topic t": "stuck"}')
    files.put_node(node)
    files.put_member(member)
    files.put_member(MemberRecord("n1", "b", "a", False))
    assert files.nodes() == {"n1": node}
    assert files.members("a", "b") == {"n1#2": member}
    assert set(files.members("b", "a")) == {"n1"}
    files.delete_node("n1")
    assert files.nodes() == {}
    assert not [p for p in (tmp_path / "nodes").iterdir() if p.name.startswith(".")]  # no half-written file left
