"""TCP relays between the host's network and a task's namespace, run on the agent's event loop.

A relay owns one listening socket (made in whichever namespace its clients live in) and, for each
connection, opens the other end with ``connect`` (in the other namespace) and copies bytes both
ways until both sides are done. Closing a relay stops its listener and every connection through
it, so nothing of a task's network outlives the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
CHUNK = 65536
RETRY_S = 0.2


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()  # a half-close passes through (HTTP/1.0 clients, ssh's EOF)
    except (ConnectionError, OSError):
        dst.close()


class Relay:
    def __init__(self, listener: socket.socket, connect: Callable[[], Awaitable[Streams]], name: str,
                 patience_s: float = 0.0) -> None:
        """``patience_s``: how long a connection waits for the other end to listen (a task's server
        still starting: its port is forwarded before it listens) before it is closed."""
        self._listener = listener
        self._connect = connect
        self.name = name
        self._patience_s = patience_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    async def start(self) -> None:
        self._listener.setblocking(False)
        self._server = await asyncio.start_server(self._accepted, sock=self._listener)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            far = await self._reach()
            if far is None:
                return
            far_reader, far_writer = far
            try:
                await asyncio.gather(_copy(reader, far_writer), _copy(far_reader, writer))
            finally:
                far_writer.close()
        finally:
            writer.close()
            self._connections.discard(task)

    async def _reach(self) -> Streams | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._patience_s
        while True:
            try:
                return await self._connect()
            except ConnectionRefusedError as exc:
                if loop.time() >= deadline:
                    log.debug("%s: nothing listens at the other end (%s)", self.name, exc)
                    return None
            except OSError as exc:
                log.debug("%s: the other end is not there (%s)", self.name, exc)
                return None
            await asyncio.sleep(RETRY_S)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        # Their cancels come back as results; a cancel of close() itself goes on to its caller.
        await asyncio.gather(*connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)


def listening_socket(sock: socket.socket, host: str, port: int) -> socket.socket:
    """``sock`` bound to (host, port) and listening; closed and re-raised on failure."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


async def open_with(sock: socket.socket, host: str, port: int) -> Streams:
    """Connect the unconnected ``sock`` (made in some namespace) to (host, port) without blocking."""
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)
