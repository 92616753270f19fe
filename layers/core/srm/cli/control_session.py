"""What every ``srm-control`` command shares: the connection options, the session they give (clients built on first
use) and the one-line usage errors."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from srm.aws.config_table import DynamoDBConfig
from srm.aws.nodes import DynamoDBNodes
from srm.aws.secrets import secrets_manager_resolver
from srm.aws.state import DynamoDBState
from srm.config.connectors import load_config
from srm.config.scopes import ConfigSnapshot, Scope, split_scopes
from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.config.store import ConfigStore, ConfigStoreError, ReplaceAll
from srm.control.edits import Control
from srm.kafka.config_store import KafkaConfig
from srm.kafka.nodes import KafkaNodes
from srm.kafka.state import KafkaState
from srm.local.nodes import NodeFiles
from srm.local.store import STATE_DIR, known_store_cluster
from srm.state import StateStore
from srm.state.nodes import Nodes

__all__ = [
    "LOCAL_REGION",
    "PROG",
    "Handler",
    "Parser",
    "Register",
    "Session",
    "UsageError",
    "common_options",
    "flow_args",
]

PROG = "srm-control"
LOCAL_REGION = "us-east-1"  # the region `srm run` gives its store and workers


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse, with errors as one line (raised, so main() prints them like every other error)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


@dataclass
class Session:
    """The connection options of one command line → its clients, built on first use."""

    args: argparse.Namespace
    out: TextIO
    err: TextIO
    _dynamodb: Any = field(default=None, repr=False)
    _state: KafkaState | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.args.local and getattr(self.args, "state_of", None):
            raise UsageError("--local and --state-of exclude each other")
        if self.in_kafka and self.args.endpoint_url:
            raise UsageError(f"{self._kafka_option()} and --endpoint-url exclude each other")

    @property
    def endpoint_url(self) -> str | None:
        if self.in_kafka:
            return None
        url = self.args.endpoint_url or None
        if url is not None:
            parsed = urlsplit(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise UsageError(
                    f"--endpoint-url {url!r} is not a URL: give the store's, e.g. http://127.0.0.1:8000 (or --local "
                    "in the directory of an srm run)"
                )
        return url

    @property
    def in_kafka(self) -> bool:
        """Whether the state is an ``srm run`` cluster's, in Kafka: this directory's (--local) or a config file's."""
        return bool(self.args.local or getattr(self.args, "state_of", None))

    def _kafka_option(self) -> str:
        return "--local" if self.args.local else "--state-of"

    @property
    def region(self) -> str:
        if self.args.region:
            return str(self.args.region)
        if self.in_kafka:
            return LOCAL_REGION
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            region = boto3.session.Session().region_name
        if not region and _loopback(self.endpoint_url):  # a store on this host answers in any region
            region = LOCAL_REGION
        if not region:
            raise UsageError("no AWS region: set AWS_DEFAULT_REGION or pass --region")
        return region

    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            endpoint = self.endpoint_url
            # A store on this host (moto, DynamoDB Local) takes any credentials: none need be configured. Set for
            # every client of the command (the config table's reader builds its own).
            if _loopback(endpoint) and boto3.session.Session().get_credentials() is None:
                os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "local"
            self._dynamodb = boto3.client(
                "dynamodb",
                region_name=self.region,
                endpoint_url=endpoint,
                config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"}),
            )
        return self._dynamodb

    def lambda_client(self) -> Any:
        """Lambda's API, where the flows' event source mappings are (AWS only)."""
        return boto3.client("lambda", region_name=self.region, config=Config(retries={"mode": "standard"}))

    def store(self) -> ConfigStore:
        if self.in_kafka:
            return KafkaConfig(self._kafka_state(), cache_seconds=0)
        return DynamoDBConfig(self.dynamodb(), self.args.config_table, cache_seconds=0)

    def control(self) -> Control:
        return Control(self.store(), author=_author())

    def state(self) -> StateStore:
        if self.in_kafka:
            return self._kafka_state()
        return DynamoDBState(self.dynamodb(), self.args.state_table)

    def nodes(self, group: str) -> Nodes:
        if self.in_kafka:
            return KafkaNodes(self._kafka_state(), group)
        return DynamoDBNodes(self.dynamodb(), self.args.state_table, group)

    def local_view(self) -> tuple[Control, Nodes]:
        """What this directory's ``srm run`` knows without its shared state: the config file it was started with
        (srm-control's edits since are not in it) and the records its own node noted in its directory."""
        state_dir = Path.cwd() / STATE_DIR
        config, _ = _local_run(state_dir, need_store=False)
        return Control(_StartedWith(config), author=_author()), NodeFiles(state_dir / "nodes", config.nodes().group_id)

    def _kafka_state(self) -> KafkaState:
        """The state of an ``srm run`` cluster, read from its state topic (no node need run): of the one started in
        this directory (--local: its config file and the cluster its node found the state on), or of the cluster
        of nodes a config file forms (--state-of FILE), within the command's ``--timeout`` if it has one."""
        if self._state is None:
            timeout = getattr(self.args, "timeout", None)
            resolver = secrets_manager_resolver(self.region)
            if self.args.local:
                config, alias = _local_run(Path.cwd() / STATE_DIR)
            else:
                config = load_config(Path(self.args.state_of))
                alias = _store_cluster(config, resolver, timeout)
            self._state = KafkaState.on_cluster(config, alias, config.nodes().topic, resolver).start(timeout)
        return self._state

    def close(self) -> None:
        if self._state is not None:
            self._state.stop()
            self._state = None

    def print(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    def print_json(self, document: Any) -> None:
        json.dump(document, self.out, indent=2)
        self.out.write("\n")

    def warn(self, message: str) -> None:
        print(f"{PROG}: warning: {message}", file=self.err)


class _StartedWith(ReplaceAll):
    """The configuration a node was started with, read-only (:class:`srm.config.store.ConfigStore`)."""

    def __init__(self, config: SrmConfig) -> None:
        self.config = config
        self.table = config.properties.source

    def load(self, *, fresh: bool = False) -> SrmConfig:
        return self.config

    def read(self) -> ConfigSnapshot:
        scopes = split_scopes(self.config.properties, self.config.clusters)
        return ConfigSnapshot(self.table, {sk: Scope(sk, v, 1) for sk, v in scopes.items()}, origin=self.table)

    def commit(
        self, base: ConfigSnapshot, changes: Mapping[str, Mapping[str, str] | None], *, author: str | None = None
    ) -> None:
        raise ConfigStoreError("the configuration cannot be changed while the state cannot be read")


def _local_run(state_dir: Path, *, need_store: bool = True) -> tuple[SrmConfig, str]:
    """The config file of the ``srm run`` started in ``state_dir``'s directory, and the cluster holding its state."""
    try:
        config = load_config(Path((state_dir / "config.path").read_text().strip()))
    except OSError:
        raise ConfigStoreError(
            f"no srm run has run in {state_dir.parent} ({STATE_DIR}/config.path not found): start `srm run --config "
            "FILE` in this directory, or give --state-of FILE or --endpoint-url"
        ) from None
    alias = known_store_cluster(config.nodes().group_id, state_dir)
    if alias is None and not need_store:
        return config, ""
    if alias is None:
        raise ConfigStoreError(
            f"the srm run in {state_dir.parent} has not found its state yet ({STATE_DIR}/store.cluster not found): "
            "wait until it has started, or give --state-of FILE"
        )
    return config, alias


def _store_cluster(config: SrmConfig, resolver: SecretResolver, timeout: float | None) -> str:
    """The cluster holding the state of the cluster of nodes ``config`` forms, every cluster asked side by side."""
    from srm.control.check import answered_topics, check_distinct, probe_clusters
    from srm.local.nodes import kafka_store_spec

    wait = timeout or 10.0
    answers = probe_clusters(config, [a for a in config.clusters if config.bootstrap_servers(a)], resolver, wait)
    check_distinct(answers)
    topics_of = answered_topics(config, answers, wait)
    return kafka_store_spec(config, resolver, create=False, topics_of=topics_of).alias


def _loopback(url: str | None) -> bool:
    return url is not None and urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")


def _author() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"srm-control:{user}@{socket.gethostname()}"


Handler = Callable[[Session, argparse.Namespace], int]
Register = Callable[[Any, argparse.ArgumentParser], None]


def common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """Connection options: on the top-level parser with defaults, on every command without (so they may also follow
    the command, and a value given before it is not overwritten)."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("where the configuration lives")
    group.add_argument(
        "--local",
        action="store_true",
        default=default(False),
        help="the state of the `srm run` started in this directory, read from Kafka (running or not)",
    )
    group.add_argument(
        "--state-of",
        metavar="FILE",
        default=default(None),
        help="the state of the srm run cluster this config file (or folder of connectors) forms, read from Kafka",
    )
    group.add_argument(
        "--endpoint-url", default=default(None), help="DynamoDB endpoint (default: AWS, or $AWS_ENDPOINT_URL)"
    )
    group.add_argument("--region", default=default(None), help="AWS region (default: $AWS_DEFAULT_REGION)")
    group.add_argument(
        "--config-table",
        default=default(os.environ.get("SRM_CONFIG_TABLE", "srm-config")),
        help="config table name (default: $SRM_CONFIG_TABLE or srm-config)",
    )
    group.add_argument(
        "--state-table",
        default=default(os.environ.get("SRM_STATE_TABLE", "srm-state")),
        help="state table name (default: $SRM_STATE_TABLE or srm-state)",
    )


def flow_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--source", required=required, metavar="ALIAS", help="source cluster alias")
    parser.add_argument("--target", required=required, metavar="ALIAS", help="target cluster alias")
