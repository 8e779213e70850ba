"""A fake master for agent tests: the agent WebSocket plus the context download endpoint.

The WebSocket side checks the Bearer join token (4401 close for a bad one), records every
``Register`` and every later agent message, answers ``Registered`` and lets the test push
``StartTask``/``KillTask``. It can be stopped and restarted on the same port to simulate a
master restart, or `blackhole()`d to simulate a network partition. Plain HTTP requests on the
same port are answered by ``process_request``:
``/api/v1/tasks/<id>/context_directory`` from ``contexts[task_id] = (session token, tgz)``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from controlplane.wire.agent_protocol import (
    AgentMessage,
    MasterMessage,
    Register,
    Registered,
    decode_from_agent,
    encode,
)

CLUSTER_ID = "cluster-under-test"


class FakeMaster:
    def __init__(self, join_token: str) -> None:
        self.join_token = join_token
        self.port = 0
        self.registers: list[Register] = []
        self.messages: list[AgentMessage] = []
        self.rejected = 0
        self.kill_on_register: list[str] = []
        self.reconnect_wait_s = 0.0  # told to the agent in Registered (0: not said)
        self._server: Server | None = None
        self._hole: socket.socket | None = None
        self._conn: ServerConnection | None = None
        self._changed = asyncio.Event()
        self.contexts: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        if self._hole is not None:
            self._hole.close()
            self._hole = None
        self._server = await serve(self._handle, "127.0.0.1", self.port, process_request=self._http)
        self.port = self._server.sockets[0].getsockname()[1] if self.port == 0 else self.port

    async def blackhole(self) -> None:
        """A network partition: the master stops answering but nothing refuses, so an agent's
        connection attempts hang until they time out (the port listens and never accepts)."""
        await self.stop()
        hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hole.bind(("127.0.0.1", self.port))
        hole.listen(64)
        self._hole = hole

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._hole is not None:
            self._hole.close()
            self._hole = None
        self._conn = None

    def _http(self, conn: ServerConnection, request: Request) -> Response | None:
        if request.path == "/agents/ws":
            return None  # go on with the WebSocket handshake
        parts = request.path.split("/")
        if len(parts) != 6 or parts[1:4] != ["api", "v1", "tasks"] or parts[5] != "context_directory":
            return conn.respond(HTTPStatus.NOT_FOUND, json.dumps({"message": "not found"}))
        entry = self.contexts.get(parts[4])
        token = request.headers.get("Grpc-Metadata-x-allocation-token", "")
        if entry is None or token != f"Bearer {entry[0]}":
            return conn.respond(HTTPStatus.UNAUTHORIZED, json.dumps({"message": "denied"}))
        self.downloads.append(parts[4])
        return conn.respond(HTTPStatus.OK, json.dumps({"b64Tgz": base64.b64encode(entry[1]).decode()}))

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        if ws.request.path != "/agents/ws":
            await ws.close(4404, "not found")
            return
        if ws.request.headers.get("Authorization") != f"Bearer {self.join_token}":
            self.rejected += 1
            self._notify()
            await ws.close(4401, "invalid join token")
            return
        try:
            first = decode_from_agent(await ws.recv())
            assert isinstance(first, Register)
            self.registers.append(first)
            await ws.send(encode(Registered(cluster_id=CLUSTER_ID, kill=list(self.kill_on_register),
                                                  reconnect_wait_s=self.reconnect_wait_s)).decode())
            self._conn = ws
            self._notify()
            async for raw in ws:
                self.messages.append(decode_from_agent(raw))
                self._notify()
        except ConnectionClosed:
            pass
        finally:
            if self._conn is ws:
                self._conn = None

    def _notify(self) -> None:
        self._changed.set()

    async def send(self, msg: MasterMessage) -> None:
        assert self._conn is not None, "no agent connected"
        await self._conn.send(encode(msg).decode())

    async def wait_until(self, cond: Callable[[], Any], timeout: float = 20.0) -> Any:
        """Wait until ``cond()`` is truthy; returns its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = cond()
            if value:
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout}s; messages: {self.messages!r}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
            except TimeoutError:
                pass

    def of_type(self, cls: type, allocation_id: str | None = None) -> list[Any]:
        return [
            m
            for m in self.messages
            if isinstance(m, cls) and (allocation_id is None or getattr(m, "allocation_id", None) == allocation_id)
        ]
