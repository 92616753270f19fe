"""Connector definitions as configuration: KafkaConnector YAML and Connect REST JSON, the three connectors of a pair
made one flow, their keys where MM2's levels put them, and a clear error for what contradicts or is not a
connector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from srm.cli.srm import main
from srm.config.connectors import load_connectors
from srm.errors import ConfigError
from srm.flow import Flow

MIRROR = "org.apache.kafka.connect.mirror."
SOURCE_BOOTSTRAP, TARGET_BOOTSTRAP = "west-kafka:9092", "east-kafka:9092"
COMMON = {
    "source.cluster.alias": "us-west",
    "target.cluster.alias": "us-east",
    "source.cluster.bootstrap.servers": SOURCE_BOOTSTRAP,
    "target.cluster.bootstrap.servers": TARGET_BOOTSTRAP,
    "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
}


def kafka_connector(path: Path, name: str, cls: str, config: dict[str, Any]) -> None:
    """A Strimzi / CSM Operator KafkaConnector resource."""
    resource = {
        "apiVersion": "kafka.strimzi.io/v1beta2",
        "kind": "KafkaConnector",
        "metadata": {"name": name, "labels": {"strimzi.io/cluster": "my-connect-cluster"}},
        "spec": {"class": MIRROR + cls, "tasksMax": 2, "config": config},
    }
    path.write_text(yaml.safe_dump(resource))


def rest_body(path: Path, name: str, cls: str, config: dict[str, Any]) -> None:
    """The body of Connect's POST /connectors."""
    path.write_text(json.dumps({"name": name, "config": {"connector.class": cls, **config}}))


def the_three(folder: Path, checkpoint_topics: str = "orders.*") -> Path:
    folder.mkdir(exist_ok=True)
    kafka_connector(
        folder / "source.yaml",
        "my-source-connector",
        "MirrorSourceConnector",
        {
            **COMMON,
            "topics": "orders.*",
            "replication.policy.class": MIRROR + "DefaultReplicationPolicy",
            "exactly.once.source.support": "enabled",
            "offset-syncs.topic.location": "target",
            "producer.override.linger.ms": 25,
            "source.cluster.client.id": "west",
            "consumer.client.id": "consumers",
            "source.consumer.client.id": "west-consumer",
            "tasks.max": 4,
        },
    )
    rest_body(
        folder / "checkpoint.json",
        "my-checkpoint-connector",
        "MirrorCheckpointConnector",
        {**COMMON, "topics": checkpoint_topics, "groups": "billing|audit", "emit.checkpoints.interval.seconds": 10},
    )
    kafka_connector(  # the seed's heartbeat connector: its target and producer are the source cluster
        folder / "heartbeat.yml",
        "my-heartbeat-connector",
        "MirrorHeartbeatConnector",
        {
            "source.cluster.alias": "us-west",
            "target.cluster.alias": "us-east",
            "target.cluster.bootstrap.servers": SOURCE_BOOTSTRAP,
            "producer.override.bootstrap.servers": SOURCE_BOOTSTRAP,
            "emit.heartbeats.interval.seconds": 2,
        },
    )
    return folder


def test_the_three_connectors_of_a_pair_make_one_flow_with_their_settings(tmp_path: Path) -> None:
    # GIVEN a source and a heartbeat connector as KafkaConnector YAML and a checkpoint connector as REST JSON
    # WHEN the folder is read
    config = load_connectors(the_three(tmp_path / "connectors"))
    # THEN one flow us-west->us-east, enabled, with the clusters' bootstrap servers (the heartbeat connector's
    # target, which points at the source cluster, is not taken for the target's)
    assert list(config.flows) == [Flow("us-west", "us-east")] == config.enabled_flows()
    assert (config.bootstrap_servers("us-west"), config.bootstrap_servers("us-east")) == (
        SOURCE_BOOTSTRAP,
        TARGET_BOOTSTRAP,
    )
    settings = config.settings("us-west", "us-east")
    assert (settings.topics, settings.groups) == ("orders.*", "billing|audit")
    assert settings.emit_checkpoints_interval_seconds == 10 and settings.exactly_once
    assert settings.offset_syncs_topic_location == "target"
    assert settings.emit_heartbeats_interval_seconds == 2
    assert settings.sync_group_offsets_enabled  # srm's default, as CSM Operator's
    # … the client prefixes with MM2's precedence: [cluster].cluster.* < [client].* < [cluster].[client].*
    flow = Flow("us-west", "us-east")
    assert config.client("us-west", "admin", flow)["client.id"][0] == "west"
    assert config.client("us-east", "consumer", flow)["client.id"][0] == "consumers"
    assert config.client("us-west", "consumer", flow)["client.id"][0] == "west-consumer"
    assert config.client("us-east", "producer", flow)["linger.ms"][0] == "25"  # producer.override.*
    # … and the Connect keys srm has no use for are listed with why
    ignored = {key for key, _ in config.ignored}
    assert {"us-west->us-east.tasks.max", "us-west->us-east.key.converter"} <= ignored
    assert "us-west->us-east.name" not in ignored  # the source connector's: take-over and the offsets API use it


def test_a_key_two_connectors_set_differently_names_both(tmp_path: Path) -> None:
    # GIVEN a checkpoint connector whose topic filter differs from the source connector's
    folder = the_three(tmp_path / "connectors", checkpoint_topics="payments.*")
    # WHEN read THEN one error naming both files and the key
    with pytest.raises(ConfigError) as raised:
        load_connectors(folder)
    message = str(raised.value)
    assert "contradict" in message and "checkpoint.json" in message and "source.yaml" in message, message
    assert "topics" in message and "\n" not in message


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({"kind": "KafkaConnector", "spec": {"class": "com.example.Other", "config": COMMON}}, "MirrorSourceConnector"),
        ({"name": "x", "config": {"connector.class": "MirrorSourceConnector"}}, "source.cluster.alias is missing"),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "not a connector definition"),
    ],
)
def test_what_is_not_a_mirror_connector_is_one_clear_error(tmp_path: Path, document: dict[str, Any], says: str) -> None:
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=says) as raised:
        load_connectors(tmp_path)
    assert "bad.yaml" in str(raised.value)


def test_a_folder_without_definitions_says_so(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(ConfigError, match=r"no \*\.yaml, \*\.yml or \*\.json"):
        load_connectors(tmp_path)


def _heartbeat(folder: Path, config: dict[str, Any]) -> None:
    kafka_connector(folder / "heartbeat.yml", "my-heartbeat-connector", "MirrorHeartbeatConnector", config)


def test_the_heartbeat_connectors_client_overrides_are_the_heartbeat_producers_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the seed's heartbeat connector, writing to the source cluster, with client settings at three levels
    folder = the_three(tmp_path / "connectors")
    _heartbeat(
        folder,
        {
            "source.cluster.alias": "us-west",
            "target.cluster.alias": "us-east",
            "target.cluster.bootstrap.servers": SOURCE_BOOTSTRAP,
            "target.cluster.security.protocol": "SASL_SSL",
            "target.cluster.client.id": "cluster-level",
            "target.cluster.refresh.topics.enabled": "false",  # not a client setting: not the producer's
            "target.producer.client.id": "producer-level",
            "target.producer.linger.ms": 7,
            "producer.override.bootstrap.servers": SOURCE_BOOTSTRAP,
            "producer.override.linger.ms": 9,
        },
    )
    # WHEN read
    config = load_connectors(folder)
    flow = Flow("us-west", "us-east")
    heartbeats = config.client("us-west", "producer", flow, "heartbeats")
    # THEN the heartbeat producer has them, producer.override.* over target.producer.* over target.cluster.*, to the
    # source cluster's bootstrap servers
    assert {k: v for k, (v, _) in heartbeats.items()} == {
        "bootstrap.servers": SOURCE_BOOTSTRAP,
        "security.protocol": "SASL_SSL",
        "client.id": "producer-level",
        "linger.ms": "9",
    }
    # … and no other client of the flow does; nothing warns
    assert "linger.ms" not in config.client("us-west", "producer", flow)
    assert config.client("us-east", "producer", flow)["linger.ms"][0] == "25"  # the source connector's
    assert not config.warnings
    # … which srm check shows
    assert main(["check", "--connectors", str(folder)]) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "heartbeats producer" in line]
    assert shown == [
        "  us-west heartbeats producer: client.id = producer-level, linger.ms = 9, security.protocol = SASL_SSL"
    ]


def test_a_heartbeat_connector_writing_elsewhere_than_the_source_warns_and_its_overrides_are_left_out(
    tmp_path: Path,
) -> None:
    # GIVEN a heartbeat connector writing to the flow's target (MM2's layout, not Connect-based replication's)
    folder = the_three(tmp_path / "connectors")
    _heartbeat(
        folder,
        {
            "source.cluster.alias": "us-west",
            "target.cluster.alias": "us-east",
            "target.cluster.bootstrap.servers": TARGET_BOOTSTRAP,
            "target.cluster.security.protocol": "SSL",
        },
    )
    # WHEN read THEN one warning line says srm writes the heartbeats to the source; the target's settings are not
    # given to the producer writing there
    config = load_connectors(folder)
    [warning] = config.warnings
    assert "heartbeat.yml" in warning and "is not the source cluster us-west" in warning and "\n" not in warning
    flow = Flow("us-west", "us-east")
    assert "security.protocol" not in config.client("us-west", "producer", flow, "heartbeats")
