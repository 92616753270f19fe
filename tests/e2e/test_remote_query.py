"""Remote querying end to end: two `srm run`s on different clusters, each advertising its metrics API on the cluster
its flow targets; one is a gateway that discovers the other through Kafka, lists both flows, answers for the other's
flow with its answer, and keeps answering (reporting it unreachable) once it stops."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from srm.local.store import free_port
from tests.support.kafka import create_topic, numbered_records, produce, unique, wait_for, wait_replicated
from tests.support.runtime import SrmRun, write_config

pytestmark = pytest.mark.e2e


def get(url: str, **params: str) -> requests.Response | None:
    try:
        return requests.get(url, params=params, timeout=20)
    except requests.ConnectionError:
        return None  # not listening yet


def flows(api: str) -> dict[tuple[str, str], dict[str, Any]]:
    got = get(f"{api}/v2/replications")
    if got is None or got.status_code != 200:
        return {}
    return {(f["source"], f["target"]): f for f in got.json()["replications"]}


def peers(api: str, names: set[str]) -> dict[str, dict[str, Any]]:
    """The peers named ``names`` in the answer (other tests' runs of this session advertised on b too)."""
    got = requests.get(f"{api}/v2/replications", timeout=20)
    assert got.status_code == 200, got.text
    return {p["name"]: p for p in got.json()["peers"] if p["name"] in names or p["url"] in names}


def test_a_gateway_run_discovers_lists_and_answers_for_another_run(clusters, tmp_path: Path):
    # GIVEN run "gw" replicating a->b, a gateway that also names a peer that never answers, and run "east"
    # replicating c->b, which names gw as its one explicit peer; each in its own directory, on known ports
    a, b, c = (clusters[n].bootstrap for n in "abc")
    p = unique("rq")
    create_topic(a, f"{p}.one", 1)
    create_topic(c, f"{p}.two", 2)
    produce(a, f"{p}.one", numbered_records(20, 1, p))
    produce(c, f"{p}.two", numbered_records(20, 2, p))
    gw, east = f"gw-{p}", f"east-{p}"
    gw_port, east_port, dead_port = free_port(), free_port(), free_port()
    gw_api, east_api, dead_api = (f"http://127.0.0.1:{port}" for port in (gw_port, east_port, dead_port))
    (tmp_path / "gw").mkdir()
    (tmp_path / "east").mkdir()
    gw_config = write_config(
        tmp_path / "gw" / "srm.yaml",
        {"a": a, "b": b},
        {"a->b": {"topics": f"{p}\\..*"}},
        **{"metrics.api.deployment.name": gw, "metrics.api.gateway.enabled": True, "metrics.api.peers": dead_api},
    )
    east_config = write_config(
        tmp_path / "east" / "srm.yaml",
        {"c": c, "b": b},
        {"c->b": {"topics": f"{p}\\..*"}},
        **{"metrics.api.deployment.name": east, "metrics.api.peers": gw_api},
    )

    # WHEN both run
    with (
        SrmRun(gw_config, tmp_path / "gw", ("--api-port", str(gw_port)), api=True) as gw_run,
        SrmRun(east_config, tmp_path / "east", ("--api-port", str(east_port)), api=True) as east_run,
    ):
        wait_replicated(c, f"{p}.two", b, f"c.{p}.two", timeout=60)

        # THEN the gateway lists both flows, each served by the run that runs it (east found through b's adverts)
        both = wait_for(
            lambda: (f := flows(gw_api)) and ("c", "b") in f and f,
            timeout=40,
            interval=0.5,
            message="c->b in the gateway's flows",
        )
        assert both[("a", "b")]["served_by"] == {"name": gw, "url": gw_api, "region": "us-east-1"}
        assert both[("c", "b")]["served_by"] == {"name": east, "url": east_api, "region": "us-east-1"}
        found = peers(gw_api, {east, gw, dead_api})
        assert found[east]["found_via"] == "kafka" and found[east]["status"] == "ok" and found[east]["flows"] == 1
        assert found[dead_api]["found_via"] == "config" and found[dead_api]["status"] == "unreachable"
        assert gw not in found  # its own advert on b is not a peer

        # … answers for east's flow with east's answer (status and body)
        def east_topics() -> dict[str, Any] | None:
            got = get(f"{east_api}/v2/replications/c/b/topics")
            if got is None or got.status_code != 200:
                return None
            return got.json() if any(t["upstream_topic"] == f"{p}.two" for t in got.json()["topics"]) else None

        direct = wait_for(east_topics, timeout=30, message="east's topics of c->b")
        through = requests.get(f"{gw_api}/v2/replications/c/b/topics", timeout=20)
        assert through.status_code == 200 and through.headers["X-Srm-Served-By"] == east
        assert through.json() == direct
        assert (f"{p}.two", f"c.{p}.two", 2) in [
            (t["upstream_topic"], t["remote_topic"], t["partitions"]) for t in direct["topics"]
        ]
        window = {"from": str(int(time.time() * 1000) - 600_000), "to": str(int(time.time() * 1000))}
        series = requests.get(f"{gw_api}/v2/cluster-metrics/c/b/record-count", params=window, timeout=20)
        direct_series = requests.get(f"{east_api}/v2/cluster-metrics/c/b/record-count", params=window, timeout=20)
        assert series.status_code == direct_series.status_code == 200 and series.json() == direct_series.json()
        unknown = requests.get(f"{gw_api}/v2/cluster-metrics/c/b/bogus", timeout=20)
        assert unknown.status_code == 400  # refused by the gateway's own validation, as east would

        # … and east, which names gw as an explicit peer, lists both flows once: gw answered it from its own tables
        from_east = requests.get(f"{east_api}/v2/replications", timeout=20).json()
        assert sorted((f["source"], f["target"], f["served_by"]["name"]) for f in from_east["replications"]) == [
            ("a", "b", gw),
            ("c", "b", east),
        ]
        assert [(q["name"], q["found_via"], q["status"]) for q in from_east["peers"]] == [(gw, "config", "ok")]

        # WHEN east stops
        assert east_run.stop() == 0, east_run.output()[-3000:]

        # THEN the gateway still answers, with east reported unreachable, and says why east's flow cannot be answered
        after = requests.get(f"{gw_api}/v2/replications", timeout=20)
        assert after.status_code == 200
        assert {(f["source"], f["target"]) for f in after.json()["replications"]} >= {("a", "b")}
        assert ("c", "b") not in {(f["source"], f["target"]) for f in after.json()["replications"]}
        down = peers(gw_api, {east})[east]
        assert down["status"] == "unreachable" and "refused" in down["error"]
        gone = requests.get(f"{gw_api}/v2/replications/c/b/topics", timeout=20)
        assert gone.status_code == 502 and east in gone.json()["message"]
        assert gw_run.alive(), gw_run.output()[-3000:]
