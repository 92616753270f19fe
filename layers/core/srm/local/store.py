"""The local DynamoDB: moto's server on a loopback port, shared by the runtime's worker processes and by
``srm-control --local`` (the URL is written to ``.srm-local/store.url``)."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

__all__ = ["LocalStore", "free_port", "local_store_url"]

STATE_DIR = Path(".srm-local")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_store_url(state_dir: Path = STATE_DIR) -> str | None:
    """The endpoint of a running ``srm run``'s store, if one is running from this directory."""
    try:
        return (state_dir / "store.url").read_text().strip() or None
    except OSError:
        return None


class LocalStore:
    """moto's ThreadedMotoServer: DynamoDB (and the other emulated AWS APIs) over HTTP on 127.0.0.1."""

    def __init__(self, port: int = 0, state_dir: Path = STATE_DIR) -> None:
        self.port = port or free_port()
        self.state_dir = state_dir
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError:
            raise RuntimeError("the local store needs moto: pip install 'serverless-srm[local]'") from None
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "store.url").write_text(self.url + "\n")
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        with contextlib.suppress(OSError):
            (self.state_dir / "store.url").unlink()
