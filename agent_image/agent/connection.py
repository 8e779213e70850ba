"""The agent's WebSocket session with the master: register, obey, report, reconnect.

One loop: connect with the join token, send ``Register`` (listing the allocations still
running), wait for ``Registered``, then read ``StartTask``/``KillTask`` while a sender drains
the outbox. Any disconnect leads to a reconnect with capped exponential backoff; tasks keep
running meanwhile. A 4401 close (or HTTP 401/403 on the handshake) means the join token is
wrong: :meth:`Connection.run` returns :data:`EXIT_TOKEN_REJECTED` instead of retrying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from controlplane.version import __version__
from controlplane.wire.agent_protocol import (
    KillTask,
    Register,
    Registered,
    Slot,
    StartTask,
    decode_from_master,
    encode,
)

from .outbox import Outbox
from .tasks import TaskRunner

log = logging.getLogger(__name__)

EXIT_TOKEN_REJECTED = 2
CLOSE_TOKEN_REJECTED = 4401
REGISTER_TIMEOUT = 30.0


class TokenRejected(Exception):
    """The master refused the join token."""


class Backoff:
    """0.5 s doubling up to 10 s, with ±25 % jitter; reset after a successful registration."""

    def __init__(self, initial: float = 0.5, maximum: float = 10.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def reset(self) -> None:
        self._next = self.initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay * random.uniform(0.75, 1.25)


class Connection:
    def __init__(
        self,
        *,
        ws_url: str,
        join_token: str,
        agent_id: str,
        pool: str,
        slots: list[Slot],
        addresses: list[str],
        outbox: Outbox,
        runner: TaskRunner,
    ) -> None:
        self._ws_url = ws_url
        self._token = join_token
        self._agent_id = agent_id
        self._pool = pool
        self._slots = slots
        self._addresses = addresses
        self._outbox = outbox
        self._runner = runner
        self._backoff = Backoff()
        self.cluster_id = ""
        self.connected = asyncio.Event()  # set while registered

    async def run(self) -> int:
        """Serve until the token is rejected (returns 2); otherwise runs until cancelled."""
        while True:
            try:
                await self._session()
            except TokenRejected:
                log.error("join token rejected")
                return EXIT_TOKEN_REJECTED
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, msgspec.DecodeError) as exc:
                log.warning("connection to master lost: %s", exc or type(exc).__name__)
            except Exception:  # noqa: BLE001 - a bug must not stop the agent from serving its tasks
                log.exception("unexpected error in the master connection")
            finally:
                self.connected.clear()
            delay = self._backoff.next_delay()
            log.info("reconnecting in %.2fs", delay)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            ws = await connect(self._ws_url, additional_headers=headers, ping_interval=10, ping_timeout=20)
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise TokenRejected() from exc
            raise
        try:
            async with ws:
                await self._serve(ws)
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == CLOSE_TOKEN_REJECTED:
                raise TokenRejected() from exc
            raise
        if ws.close_code == CLOSE_TOKEN_REJECTED:
            raise TokenRejected()
        log.warning("master closed the connection (code %s, %r)", ws.close_code, ws.close_reason)

    async def _serve(self, ws: ClientConnection) -> None:
        await self._register(ws)
        self._backoff.reset()
        self.connected.set()
        sender = asyncio.create_task(self._send_loop(ws))
        try:
            async for raw in ws:
                self._handle(decode_from_master(raw))
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await sender

    async def _register(self, ws: ClientConnection) -> None:
        running = self._runner.running_ids()
        reg = Register(
            agent_id=self._agent_id,
            slots=self._slots,
            pool=self._pool,
            version=__version__,
            addresses=self._addresses,
            running=running,
        )
        await ws.send(encode(reg).decode())
        while True:
            raw = await asyncio.wait_for(ws.recv(), REGISTER_TIMEOUT)
            msg = decode_from_master(raw)
            if isinstance(msg, Registered):
                break
            log.warning("expected Registered, got %s; ignoring", type(msg).__name__)
        self.cluster_id = msg.cluster_id
        log.info("registered as %s (cluster %s, %d running)", self._agent_id, msg.cluster_id, len(running))
        for alloc in msg.kill:
            self._runner.kill(alloc)

    def _handle(self, msg: object) -> None:
        if isinstance(msg, StartTask):
            log.info("start %s (task %s)", msg.allocation_id, msg.task_id)
            self._runner.start(msg)
        elif isinstance(msg, KillTask):
            log.info("kill %s (grace %.1fs)", msg.allocation_id, msg.grace_seconds)
            self._runner.kill(msg.allocation_id, msg.grace_seconds)
        elif isinstance(msg, Registered):
            self.cluster_id = msg.cluster_id
            for alloc in msg.kill:
                self._runner.kill(alloc)

    async def _send_loop(self, ws: ClientConnection) -> None:
        try:
            while True:
                msg = await self._outbox.peek()
                await ws.send(encode(msg).decode())
                self._outbox.pop()
        except ConnectionClosed:
            return
        except Exception:  # noqa: BLE001 - never keep a connection that cannot send
            log.exception("sending to the master failed")
            await ws.close(1011, "agent send failure")
