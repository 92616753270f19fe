"""A Kafka Connect worker in distributed mode, from the same Kafka install as the local brokers: Connect-based
replication as CSM Operator deploys it (a Connect cluster on the target, the MirrorMaker 2 connectors posted to its
REST API), run as ``connect-distributed.sh worker.properties`` runs it, stopped by PID."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from srm.local.mirrormaker import KafkaJavaProcess, kafka_java_command
from srm.local.store import free_port
from tests.support.kafka import wait_for
from tests.support.runtime import write_properties

__all__ = ["ConnectWorker"]


class ConnectWorker(KafkaJavaProcess):
    """One worker of a Connect cluster whose internal topics are on ``bootstrap``; its output goes to
    ``workdir/connect.log``. ``properties`` are the worker config's (the file is :attr:`config`)."""

    def __init__(self, workdir: Path, bootstrap: str, prefix: str, **settings: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.config = write_properties(
            workdir / "connect-distributed.properties",
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{prefix}-connect",
                "offset.storage.topic": f"{prefix}-connect-offsets",
                "config.storage.topic": f"{prefix}-connect-configs",
                "status.storage.topic": f"{prefix}-connect-status",
                "offset.storage.replication.factor": "-1",
                "config.storage.replication.factor": "-1",
                "status.storage.replication.factor": "-1",
                "offset.storage.partitions": "5",
                "status.storage.partitions": "1",
                "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "listeners": self.url,
                **settings,
            },
        )
        super().__init__(
            kafka_java_command("org.apache.kafka.connect.cli.ConnectDistributed", self.config, workdir, "512m"),
            workdir,
            "connect.log",
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def wait_ready(self, timeout: float = 120.0) -> None:
        def ready() -> bool:
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-3000:]
            try:
                self.request("GET", "/connectors")
                return True
            except (urllib.error.URLError, ConnectionError, OSError):
                return False

        wait_for(ready, timeout, interval=0.5, message="the Connect worker's REST API")

    def create(self, body: dict[str, Any]) -> None:
        """POST /connectors: a connector as its REST body defines it."""
        self.request("POST", "/connectors", body)

    def stop(self, graceful: bool = True, timeout: float = 60.0) -> int | None:
        """SIGTERM (the tasks stop and Connect commits their source offsets) or, not ``graceful``, SIGKILL."""
        return super().stop(graceful, timeout)
