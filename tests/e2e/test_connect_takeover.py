"""A Kafka Connect-based replication user's migration, end to end, against a real Connect worker (distributed mode,
from the same Kafka install): the MirrorSourceConnector of a folder of connector definitions replicates on a Connect
cluster whose offsets topic is on the target; Connect stops; ``srm takeover --connectors DIR --worker-config FILE``
reads the connector's positions there and commits them, and ``srm run --connectors DIR`` continues: nothing lost,
nothing copied twice.

The clusters are the session's, under aliases of this test's own: the connectors' internal topics, heartbeats and
checkpoints never meet another test's.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from srm.kafka.transactions import read_source_offsets
from tests.support.connect import ConnectWorker
from tests.support.kafka import create_topic, end_offsets, numbered_records, produce, read_topic, unique, wait_for
from tests.support.runtime import SrmRun, http, run_cli, wait_log
from tests.unit.test_connectors import rest_body

pytestmark = pytest.mark.e2e

SOURCE, TARGET = "cwest", "ceast"
PARTITIONS = 2
MIRROR = "org.apache.kafka.connect.mirror."


@dataclass(frozen=True)
class Replicated:
    """What a Connect cluster replicated before it stopped: 150 records per partition of ``topic``."""

    a: str
    b: str
    folder: Path  # the connector definitions (the source connector's REST body)
    name: str  # the source connector's
    topic: str
    remote: str
    worker: ConnectWorker


def _replicated_on_connect(clusters, tmp_path: Path, offsets_topic: str) -> Replicated:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("ctk")
    topic, remote = f"{prefix}.orders", f"{SOURCE}.{prefix}.orders"
    create_topic(a, topic, PARTITIONS)
    produce(a, topic, numbered_records(200, PARTITIONS, topic))
    # the flow's source connector as a Connect REST body in a folder (srm reads the same file)
    folder = tmp_path / "connectors"
    folder.mkdir()
    name = f"{prefix}-source"
    config = {
        "source.cluster.alias": SOURCE,
        "target.cluster.alias": TARGET,
        "source.cluster.bootstrap.servers": a,
        "target.cluster.bootstrap.servers": b,
        "topics": f"{prefix}\\..*",
        "refresh.topics.interval.seconds": "5",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        # header values as bytes too (Connect's default turns them into base64 text)
        "header.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "tasks.max": "1",
    }
    rest_body(folder / "source.json", name, MIRROR + "MirrorSourceConnector", config)
    body = json.loads((folder / "source.json").read_text())

    # … replicating on a Connect cluster on the target, which commits its source positions every second
    settings = {"offset.flush.interval.ms": "1000", "offset.storage.topic": offsets_topic}
    worker = ConnectWorker(tmp_path / "connect", b, prefix, **settings)
    try:
        worker.wait_ready()
        worker.create(body)
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 200, 180, message=f"Connect replicating {remote}")
        produce(a, topic, numbered_records(100, PARTITIONS, topic, start=200))
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 300, 60, message="Connect replicating more")
    finally:
        worker.stop(graceful=True)  # its tasks stop, and Connect commits where they stood
    wanted = [(SOURCE, topic, p) for p in range(PARTITIONS)]
    recorded = read_source_offsets({"bootstrap.servers": b}, offsets_topic, wanted, 30, connector=name)
    assert {p: o.next for (_, p), o in recorded.items()} == {p: 150 for p in range(PARTITIONS)}
    return Replicated(a, b, folder, name, topic, remote, worker)


def test_srm_takes_over_from_a_connect_cluster_by_its_worker_config_losing_and_duplicating_nothing(
    clusters, tmp_path: Path
):
    # GIVEN a Connect cluster that replicated with an offsets topic of its own name, and stopped
    offsets_topic = f"{unique('ctk')}-connect-offsets"
    r = _replicated_on_connect(clusters, tmp_path, offsets_topic)
    a, b, folder, name, topic, remote, worker = r.a, r.b, r.folder, r.name, r.topic, r.remote, r.worker

    # WHEN srm takeover reads the connector's positions by the worker config (a dry run first)
    args = ("--connectors", str(folder), "--worker-config", str(worker.config), "--json")
    dry = run_cli("srm", "takeover", *args, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    [report] = json.loads(dry.stdout)
    starts = {(s["topic"], s["partition"]): s for s in report["partitions"]}
    for p in range(PARTITIONS):
        assert starts[(topic, p)]["offset"] == 150
        assert starts[(topic, p)]["start_from"] == "connect-offsets"
        assert starts[(topic, p)]["where"] == f"{offsets_topic} on {TARGET}"
        assert starts[(topic, p)]["tail"] == 0  # a clean stop: Connect recorded every copy it made
    # … without the worker config, the default topics are not there: srm would start after the offset syncs
    default = run_cli("srm", "takeover", "--connectors", str(folder), "--json", cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    assert {s["start_from"] for s in json.loads(default.stdout)[0]["partitions"]} == {"mm2-offset-sync"}
    done = run_cli("srm", "takeover", *args[:-1], "--no-dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # (the heartbeats topic too, when Connect had listed it by then)
    assert re.search(r"(\d) of \1 partitions start where MirrorMaker 2 stood", done.stdout), done.stdout

    # … and srm run continues on the same folder, with records arriving meanwhile
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with SrmRun(folder, run_dir, api=True) as run:
        produce(a, topic, numbered_records(100, PARTITIONS, topic, start=300))
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 400, 120, message="srm replicating")
        time.sleep(2)  # anything more on the target would be a duplicate
        assert run.alive(), run.output()[-3000:]

        # … and a Connect script reaches the flow's offsets by the source connector's name, over plain HTTP
        url = wait_for(lambda: _api_url(run_dir), 60, message="the metrics API's URL")
        assert wait_for(lambda: http("GET", f"{url}/connectors"), 60, message="GET /connectors") == (200, [name])
        shown = [
            {"partition": {"cluster": SOURCE, "topic": topic, "partition": p}, "offset": {"offset": 199}}
            for p in range(PARTITIONS)
        ]

        def offsets(connector: str) -> list[dict[str, Any]] | None:
            status, body = http("GET", f"{url}/connectors/{urllib.parse.quote(connector)}/offsets")
            assert status == 200, body
            found = [o for o in body["offsets"] if o["partition"]["topic"] == topic]
            return found if found == shown else None

        wait_for(lambda: offsets(name), 60, message=f"GET /connectors/{name}/offsets")
        assert offsets(f"{SOURCE}->{TARGET}") == shown
        # … whose PATCH and DELETE answer to it too: refused as Connect does while the connector runs
        body = {"offsets": [{"partition": shown[0]["partition"], "offset": {"offset": 9}}]}
        for method, payload in (("PATCH", body), ("DELETE", None)):
            status, answer = http(method, f"{url}/connectors/{name}/offsets", payload)
            assert status == 400 and f"{SOURCE}->{TARGET} is replicating" in answer["message"], answer
        status, answer = http("GET", f"{url}/connectors/nope/offsets")
        assert status == 404 and name in answer["message"], answer

    # THEN the target holds each source record exactly once, in order
    source = {p: [r.content() for r in recs] for p, recs in read_topic(a, topic).items()}
    copied = {p: [r.content() for r in recs] for p, recs in read_topic(b, remote).items()}
    assert {p: len(v) for p, v in source.items()} == {p: 200 for p in range(PARTITIONS)}
    assert copied == source


def test_srm_run_takes_over_by_itself_from_the_default_offsets_topic(clusters, tmp_path: Path):
    # GIVEN a Connect cluster that replicated with Apache Kafka's documented offsets topic, connect-offsets, and stopped
    r = _replicated_on_connect(clusters, tmp_path, "connect-offsets")
    # WHEN srm run is given the folder, with no srm takeover before it, and records arrive meanwhile
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with SrmRun(r.folder, run_dir) as run:
        wait_log(run, f"taking over {r.topic}-0 from MirrorMaker 2 at offset 150 (connect-offsets on {TARGET})", 60)
        produce(r.a, r.topic, numbered_records(100, PARTITIONS, r.topic, start=300))
        wait_for(lambda: sum(end_offsets(r.b, r.remote).values()) >= 400, 120, message="srm replicating")
        time.sleep(2)  # anything more on the target would be a duplicate
        assert run.alive(), run.output()[-3000:]
    # THEN the target holds each source record exactly once, in order
    source = {p: [x.content() for x in recs] for p, recs in read_topic(r.a, r.topic).items()}
    assert {p: [x.content() for x in recs] for p, recs in read_topic(r.b, r.remote).items()} == source


def _api_url(workdir: Path) -> str | None:
    path = workdir / ".srm-local" / "api.url"
    return path.read_text().strip() or None if path.exists() else None
