"""A TCP proxy on loopback that can cut the link it carries, for network faults without crashing a broker.

:class:`FaultProxy` forwards every connection made to its port to ``127.0.0.1:<upstream_port>``. :meth:`cut` drops
every open connection and then either blackholes new ones (accepted, never forwarded nor answered: what a client sees
of a network partition, where only its own timeouts tell it something is wrong) or refuses them (it stops listening:
a host that is up with nothing on the port). :meth:`restore` closes the held connections and forwards again.

Bounded: at most ``max_connections`` at a time (more are closed at once), and it stops itself after ``lifetime_s``
should a test never close it. One asyncio loop on a daemon thread; the public methods are for other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any, Literal

__all__ = ["FaultProxy"]

Mode = Literal["forward", "blackhole", "refuse"]


class FaultProxy:
    def __init__(self, upstream_port: int, *, max_connections: int = 256, lifetime_s: float = 900.0) -> None:
        self.upstream_port = upstream_port
        self.max_connections = max_connections
        self.mode: Mode = "forward"
        self.accepted = self.blackholed = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._server: asyncio.Server | None = None  # None while refusing
        self._writers: set[asyncio.StreamWriter] = set()  # every open connection's two ends, forwarded or held
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(lifetime_s,), name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self, mode: Mode = "blackhole") -> None:
        """Drop every open connection; new ones are blackholed or refused until :meth:`restore`."""
        self._call(self._set_mode(mode))

    def restore(self) -> None:
        """Close the connections held while cut (their requests were never delivered); forward new ones again."""
        self._call(self._set_mode("forward"))

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's side ---------------------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _run(self, lifetime_s: float) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(lifetime_s))
        self._loop.close()

    async def _serve(self, lifetime_s: float) -> None:
        self._server = await asyncio.start_server(self._accept, sock=self._sock)
        self._ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), lifetime_s)
        await self._listen(False)
        self._drop()
        pumps = asyncio.all_tasks() - {asyncio.current_task()}
        if pumps:  # they end once their dropped connections' ends see it
            await asyncio.wait(pumps, timeout=5)

    async def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        self._drop()
        await self._listen(mode != "refuse")

    async def _listen(self, on: bool) -> None:
        if not on and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif on and self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)  # SO_REUSEADDR

    def _drop(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if len(self._writers) >= 2 * self.max_connections:  # two ends per connection
            writer.transport.abort()
            return
        self._writers.add(writer)
        if self.mode == "blackhole":
            self.blackholed += 1  # held open, its bytes left unread, until restored or closed
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pump(reader, up_writer, writer), self._pump(up_reader, writer, up_writer))

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, other: asyncio.StreamWriter
    ) -> None:
        """Copy one direction until either end closes; then close both ends."""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for end in (writer, other):
                self._writers.discard(end)
                end.transport.abort()
