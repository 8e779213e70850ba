"""The agent's WebSocket session with the master: register, obey, report, reconnect.

One loop: connect with the join token, send ``Register`` (listing the allocations still
running), wait for ``Registered``, then read ``StartTask``/``KillTask`` while a sender drains
the outbox. Any disconnect leads to a reconnect with capped exponential backoff; tasks keep
running meanwhile. A 4401 close (or HTTP 401/403 on the handshake) means the join token is
wrong: :meth:`Connection.run` returns :data:`EXIT_TOKEN_REJECTED` instead of retrying.

Orphans: the master re-queues an agent's work once the agent has been away for longer than
``agent_reconnect_wait`` (``Registered.reconnect_wait_s``). An agent that has heard nothing from
the master (no message, no pong to its heartbeat) for nearly that long kills its tasks, so a
re-queued trial never runs twice; their exits are reported when the master is reached again.
Silence while connections are *refused* does not count: no master is running then, and a
restarted master gives every agent a fresh window, so a master restart keeps the trials.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import time
from collections.abc import Callable

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
from .slots import available_cpus
from .tasks import TaskRunner

log = logging.getLogger(__name__)

EXIT_TOKEN_REJECTED = 2
CLOSE_TOKEN_REJECTED = 4401
REGISTER_TIMEOUT = 30.0


# When a master does not say how long it waits for an agent (`agent_reconnect_wait`, 70 s by default:
# longer than a database failover, during which the master keeps answering its agents).
DEFAULT_RECONNECT_WAIT_S = 70.0
ORPHAN_CHECK_S = 0.5


class OrphanWatch:
    """When this agent last heard from the master, and whether its tasks are orphans by now.

    The tasks are killed a margin before the master's window ends (a fifth of it, at most 5 s)
    and get half that margin to exit, so they are gone before the master re-queues them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.window_s = DEFAULT_RECONNECT_WAIT_S
        self.last_heard = clock()
        self.killed = False  # this silence's orphans were killed already
        self.master_down = False  # the last attempt was refused: no master is running

    def heard(self) -> None:
        self.last_heard = self.clock()
        self.killed = False
        self.master_down = False

    def refused(self) -> None:
        """The master's host refused the connection: no master runs, so none is counting this
        agent as lost (a restarted one gives it a fresh window): the silence does not count."""
        self.last_heard = self.clock()
        self.master_down = True

    def unreachable(self) -> None:
        """An attempt failed otherwise (timeout, unreachable network): a master may be running
        and counting; the silence counts from the last word or refusal."""
        self.master_down = False

    def told_window(self, seconds: float) -> None:
        if seconds > 0:
            self.window_s = seconds

    @property
    def margin_s(self) -> float:
        return min(5.0, self.window_s * 0.2)

    def silent_for(self) -> float:
        return self.clock() - self.last_heard

    def orphaned(self) -> bool:
        """Silent for long enough that the master is about to re-queue this agent's work."""
        return not self.killed and not self.master_down and self.silent_for() >= self.window_s - self.margin_s


def refused(exc: BaseException) -> bool:
    """A connection refused (no master listening); with several addresses, asyncio joins the
    errors into one OSError whose text names them."""
    return isinstance(exc, ConnectionRefusedError) or (
        isinstance(exc, OSError) and exc.errno is None and os.strerror(errno.ECONNREFUSED) in str(exc))


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
        overlay_port: int = 0,
        instance_type: str = "",
    ) -> None:
        self._ws_url = ws_url
        self._token = join_token
        self._agent_id = agent_id
        self._pool = pool
        self._slots = slots
        self._addresses = addresses
        self._overlay_port = overlay_port
        self._instance_type = instance_type
        self._outbox = outbox
        self._runner = runner
        self._backoff = Backoff()
        self.cluster_id = ""
        self.connected = asyncio.Event()  # set while registered
        self.watch = OrphanWatch()

    async def run(self) -> int:
        """Serve until the token is rejected (returns 2); otherwise runs until cancelled."""
        watcher = asyncio.create_task(self._watch_orphans(), name="orphan-watch")
        try:
            return await self._run()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch_orphans(self) -> None:
        while True:
            await asyncio.sleep(ORPHAN_CHECK_S)
            running = self._runner.running_ids()
            if not running or not self.watch.orphaned():
                continue
            self.watch.killed = True
            log.error("no word from the master for %.1fs (its reconnect window is %.1fs): it re-queues this "
                      "agent's work, so killing %d orphaned task(s): %s", self.watch.silent_for(),
                      self.watch.window_s, len(running), ", ".join(running))
            for alloc in running:
                self._runner.kill(alloc, self.watch.margin_s / 2)

    async def _run(self) -> int:
        while True:
            try:
                await self._session()
            except TokenRejected:
                log.error("join token rejected")
                return EXIT_TOKEN_REJECTED
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, msgspec.DecodeError) as exc:
                log.warning("connection to master lost: %s", exc or type(exc).__name__)
                if refused(exc):
                    self.watch.refused()
                else:
                    self.watch.unreachable()
            except Exception:  # a bug must not stop the agent from serving its tasks
                log.exception("unexpected error in the master connection")
                self.watch.unreachable()
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
        heartbeat = asyncio.create_task(self._heartbeat(ws))
        try:
            async for raw in ws:
                self.watch.heard()
                self._handle(decode_from_master(raw))
        finally:
            for t in (sender, heartbeat):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await t

    async def _heartbeat(self, ws: ClientConnection) -> None:
        """Pings often enough that `watch` knows when the master was last reachable; a lost
        connection is noticed by the keepalive and the receive loop, not here."""
        while True:
            interval = max(0.2, min(5.0, self.watch.window_s / 5))
            try:
                pong = asyncio.ensure_future(await ws.ping())
            except ConnectionClosed:
                return
            # asyncio.wait, not wait_for: wait_for (before 3.12) can swallow this task's
            # cancellation when the pong arrives at the same moment, and then nothing stops it.
            done, _ = await asyncio.wait({pong}, timeout=interval * 2)
            if pong in done and not pong.cancelled() and pong.exception() is None:
                self.watch.heard()
            await asyncio.sleep(interval)

    async def _register(self, ws: ClientConnection) -> None:
        running = self._runner.running_ids()
        reg = Register(
            agent_id=self._agent_id,
            slots=self._slots,
            pool=self._pool,
            version=__version__,
            addresses=self._addresses,
            running=running,
            environments=self._runner.environment_names(),
            overlay_port=self._overlay_port,
            instance_type=self._instance_type,
            cpus=available_cpus(),
        )
        await ws.send(encode(reg).decode())
        while True:
            raw = await asyncio.wait_for(ws.recv(), REGISTER_TIMEOUT)
            msg = decode_from_master(raw)
            if isinstance(msg, Registered):
                break
            log.warning("expected Registered, got %s; ignoring", type(msg).__name__)
        self.cluster_id = msg.cluster_id
        self.watch.told_window(msg.reconnect_wait_s)
        self.watch.heard()
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
        except Exception:  # never keep a connection that cannot send
            log.exception("sending to the master failed")
            await ws.close(1011, "agent send failure")
