"""What every ``srm-control`` command shares: the connection options, the session they give (clients built on first
use) and the one-line usage errors."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TextIO
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from srm.aws.config_table import ConfigStore, ConfigStoreError
from srm.aws.secrets import secrets_manager_resolver
from srm.aws.state import DynamoDBState
from srm.config.connectors import load_config
from srm.control.edits import Control
from srm.errors import ConfigError
from srm.kafka.state import KafkaState, state_topic
from srm.local.store import STATE_DIR, known_store_cluster, local_store_url
from srm.state import StateStore

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

    @property
    def endpoint_url(self) -> str | None:
        if self.args.local:
            if self.args.endpoint_url:
                raise UsageError("--local and --endpoint-url exclude each other")
            url = local_store_url(Path.cwd() / STATE_DIR)
            if url is None:
                raise ConfigStoreError(
                    f"no local runtime is running in {Path.cwd()} ({STATE_DIR}/store.url not found): start "
                    "`srm run --config FILE` in this directory, or give --endpoint-url"
                )
            return url
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
    def region(self) -> str:
        if self.args.region:
            return str(self.args.region)
        if self.args.local:
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
            # A store on this host (srm run's, moto, DynamoDB Local) takes any credentials: none need be configured.
            # Set for every client of the command (the config table's reader builds its own).
            if _loopback(endpoint) and boto3.session.Session().get_credentials() is None:
                os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "local"
            self._dynamodb = boto3.client(
                "dynamodb",
                region_name=self.region,
                endpoint_url=endpoint,
                config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"}),
            )
        return self._dynamodb

    def store(self) -> ConfigStore:
        return ConfigStore(self.dynamodb(), self.args.config_table, cache_seconds=0)

    def control(self) -> Control:
        return Control(self.store(), author=_author())

    def state(self) -> StateStore:
        if self.args.local:
            return self._local_state()
        return DynamoDBState(self.dynamodb(), self.args.state_table)

    def _local_state(self) -> StateStore:
        """The state of the ``srm run`` in this directory: its state topic, on the cluster its node found it on,
        reached with the settings of the config file that ``srm run`` was given (the config table holds its literal
        secrets as references to the workers' environment), within the command's ``--timeout`` if it has one."""
        config = self.store().load()
        state_dir = Path.cwd() / STATE_DIR
        alias = known_store_cluster(config.nodes().topic, state_dir)
        if alias is None:  # no state topic noted in this directory: the state is in the store's state table
            return DynamoDBState(self.dynamodb(), self.args.state_table)
        clients = config
        with contextlib.suppress(OSError, ConfigError):
            given = load_config(Path((state_dir / "config.path").read_text().strip()))
            if given.nodes().group_id == config.nodes().group_id:
                clients = given
        resolver = secrets_manager_resolver(self.region)
        topic = state_topic(config.nodes().group_id)
        timeout = getattr(self.args, "timeout", None)
        return KafkaState.on_cluster(clients, alias, topic, resolver).start(timeout)

    def print(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    def print_json(self, document: Any) -> None:
        json.dump(document, self.out, indent=2)
        self.out.write("\n")

    def warn(self, message: str) -> None:
        print(f"{PROG}: warning: {message}", file=self.err)


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
        help="the store of the `srm run` started in this directory (.srm-local/store.url)",
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
