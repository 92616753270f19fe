"""Where a Connect cluster keeps a flow's source offsets: its worker config (connect-distributed.properties or a
KafkaConnect resource), else the documented defaults on the target; the source connector's name kept for its keys;
bad input one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from srm.cli.srm import main
from srm.config.connect_worker import ConnectOffsets, WorkerConfig, connect_offsets
from srm.config.connectors import load_connectors, source_connector_name
from srm.errors import ConfigError
from srm.flow import Flow
from tests.unit.test_connectors import SOURCE_BOOTSTRAP, TARGET_BOOTSTRAP, the_three

FLOW = Flow("us-west", "us-east")


def test_a_worker_config_names_the_offsets_topic_on_the_cluster_of_its_bootstrap_servers(tmp_path: Path) -> None:
    # GIVEN the three connectors and a connect-distributed.properties on the target (another broker of it listed first)
    config = load_connectors(the_three(tmp_path / "connectors"))
    worker = tmp_path / "connect-distributed.properties"
    worker.write_text(f"bootstrap.servers=east-2:9092,{TARGET_BOOTSTRAP}\noffset.storage.topic=west-east-offsets\n")
    # WHEN read THEN the topic is on the target, its records keyed by the source connector's name
    assert source_connector_name(config, FLOW) == "my-source-connector"
    found = connect_offsets(config, FLOW, WorkerConfig.read(worker))
    assert found == ConnectOffsets(("west-east-offsets",), "us-east", "my-source-connector")
    # … on the source when the Connect cluster is there
    worker.write_text(f"bootstrap.servers=PLAINTEXT://{SOURCE_BOOTSTRAP}\noffset.storage.topic=o\n")
    assert connect_offsets(config, FLOW, WorkerConfig.read(worker)).cluster == "us-west"


def test_without_a_worker_config_the_documented_defaults_on_the_target_are_read(tmp_path: Path) -> None:
    config = load_connectors(the_three(tmp_path / "connectors"))
    found = connect_offsets(config, FLOW, None)
    assert found == ConnectOffsets(("connect-offsets", "connect-cluster-offsets"), "us-east", "my-source-connector")


def test_a_kafka_connect_resource_is_a_worker_config_with_strimzis_default_topic(tmp_path: Path) -> None:
    resource = {"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaConnect", "metadata": {"name": "c"}}
    path = tmp_path / "connect.yaml"
    path.write_text(yaml.safe_dump({**resource, "spec": {"bootstrapServers": TARGET_BOOTSTRAP, "config": {}}}))
    assert WorkerConfig.read(path) == WorkerConfig("connect-cluster-offsets", TARGET_BOOTSTRAP, str(path))
    spec = {"bootstrapServers": TARGET_BOOTSTRAP, "config": {"offset.storage.topic": "mine"}}
    path.write_text(yaml.safe_dump({**resource, "spec": spec}))
    assert WorkerConfig.read(path).offsets_topic == "mine"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("bootstrap.servers=east-kafka:9092\n", "offset.storage.topic is missing"),
        ("bootstrap.servers=elsewhere:9092\noffset.storage.topic=o\n", "none of the connectors' clusters"),
    ],
)
def test_a_worker_config_srm_cannot_follow_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    config = load_connectors(the_three(tmp_path / "connectors"))
    worker = tmp_path / "worker.properties"
    worker.write_text(text)
    with pytest.raises(ConfigError, match=says) as raised:
        connect_offsets(config, FLOW, WorkerConfig.read(worker))
    assert "worker.properties" in str(raised.value) and "\n" not in str(raised.value)


def test_takeover_refuses_a_worker_config_without_connectors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "srm.yaml").write_text("clusters: {a: {bootstrap.servers: 'a:9092'}, b: {bootstrap.servers: 'b:9092'}}")
    worker = tmp_path / "w.properties"
    worker.write_text("offset.storage.topic=o\n")
    code = main(["takeover", "--config", str(tmp_path / "srm.yaml"), "--worker-config", str(worker)])
    err = capsys.readouterr().err
    assert code == 2 and "--worker-config goes with --connectors" in err and err.count("\n") == 1, err
