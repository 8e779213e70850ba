"""Hollow agents: N websocket clients in one event loop that speak the agent protocol as
``agent_image/agent/`` does, with no processes behind their tasks.

Each agent connects with the join token, sends ``Register`` (its slots, the pool, version, an
address of its own, the allocations it still runs, the ``default`` environment, CPUs), waits for
``Registered``, then pings as the real agent's heartbeat does (every fifth of the master's
reconnect window, at most 5 s) on top of the websockets keepalive. Its messages go through an
outbox drained by one sender, so a reconnect sends what was not sent yet, after ``Registered``.

A ``StartTask`` is answered with ``TaskStarted`` at once. The task then holds its slot until the
churn begins (``Fleet.begin_churn``), runs ``trial_s`` seconds (the tasks running when the churn
begins get a uniform share of it, so exits are spread evenly), posts a few metric rows to
``/api/v1/trials/{id}/metrics/batch`` with its allocation token (as the core API's shipper does), and
sends ``TaskExited(0)``. A ``KillTask`` (or ``Registered.kill``) ends it at once with exit code 143 and
reason ``killed``: the real agent's SIGTERM to a process that exits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from benchmarks.hollow.figures import Recorder
from controlplane.version import __version__
from controlplane.wire.agent_protocol import (
    AgentMessage,
    KillTask,
    Register,
    Registered,
    Slot,
    StartTask,
    TaskExited,
    TaskStarted,
    decode_from_master,
    encode,
)

TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"  # controlplane/core/_session.py
KILLED_EXIT = 128 + 15  # a process that exits on the agent's SIGTERM
METRIC_ATTEMPTS = 4
DEFAULT_WINDOW_S = 70.0  # the agent's default reconnect window (agent/connection.py)
_pids = itertools.count(10_000)


class Fleet:
    """The shared state of every hollow agent: what they report to the benchmark."""

    def __init__(self, master_url: str, join_token: str, *, trial_s: float, metric_rows: int,
                 max_batches: int, rec: Recorder) -> None:
        self.master_url = master_url
        self.ws_url = master_url.replace("http", "ws", 1) + "/agents/ws"
        self.join_token = join_token
        self.trial_s = trial_s
        self.metric_rows = metric_rows
        self.max_batches = max_batches
        self.rec = rec
        self.http = httpx.AsyncClient(timeout=120.0, limits=httpx.Limits(max_connections=64))
        self.churn = asyncio.Event()
        self.stopping = False
        self.agents: list[HollowAgent] = []
        self.running: set[str] = set()  # allocations whose TaskStarted is sent and TaskExited not
        self.trial_ids: list[int] = []
        self.start_arrivals: list[float] = []  # monotonic time of each StartTask received

    def add(self, agent_id: str, slots: int, index: int) -> HollowAgent:
        agent = HollowAgent(self, agent_id, slots, f"10.{64 + index // 65_000}.{index // 250 % 260}.{index % 250 + 1}")
        self.agents.append(agent)
        return agent

    def begin_churn(self) -> None:
        self.churn.set()

    def end_churn(self) -> None:
        """Tasks that start from now on hold their slots (until killed): the churn stops."""
        self.churn.clear()

    def registered(self) -> int:
        return sum(a.registered.is_set() for a in self.agents)

    async def close(self) -> None:
        self.stopping = True
        for agent in self.agents:
            await agent.stop()
        await self.http.aclose()


class HollowAgent:
    def __init__(self, fleet: Fleet, agent_id: str, slots: int, address: str) -> None:
        self.fleet = fleet
        self.agent_id = agent_id
        self.slots = [Slot(id=i, type="cpu", brand="cpu") for i in range(slots)]
        self.address = address
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.finished: set[str] = set()
        self.outbox: deque[AgentMessage] = deque()
        self.queued = asyncio.Event()
        self.registered = asyncio.Event()
        self.window_s = DEFAULT_WINDOW_S
        self.sessions = 0  # registrations: more than one means it reconnected
        self._main: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._main = asyncio.create_task(self._run(), name=f"hollow-{self.agent_id}")

    async def stop(self) -> None:
        for t in [self._main, *self.tasks.values()]:
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    def put(self, msg: AgentMessage) -> None:
        self.outbox.append(msg)
        self.queued.set()

    # -- the connection, as agent/connection.py ------------------------------------------------
    async def _run(self) -> None:
        delay = 0.5
        while not self.fleet.stopping:
            try:
                await self._session()
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake) as exc:
                if not self.fleet.stopping:
                    self.fleet.rec.count("ws_errors")
                    self.fleet.rec.count(f"ws_error:{type(exc).__name__}")
            finally:
                self.registered.clear()
            await asyncio.sleep(delay * random.uniform(0.75, 1.25))
            delay = min(delay * 2, 10.0)

    async def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self.fleet.join_token}"}
        async with connect(self.fleet.ws_url, additional_headers=headers, ping_interval=10, ping_timeout=20,
                           open_timeout=60) as ws:
            await self._register(ws)
            sender = asyncio.create_task(self._send_loop(ws))
            heartbeat = asyncio.create_task(self._heartbeat(ws))
            try:
                async for raw in ws:
                    self._handle(decode_from_master(raw))
            finally:
                for t in (sender, heartbeat):
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                        await t
            if not self.fleet.stopping:
                self.fleet.rec.count("ws_closed_by_master")

    async def _register(self, ws: ClientConnection) -> None:
        running = [a for a, t in self.tasks.items() if not t.done()]
        reg = Register(agent_id=self.agent_id, slots=self.slots, pool="default", version=__version__,
                       addresses=[self.address], running=running, cpus=len(self.slots))
        await ws.send(encode(reg).decode())
        while True:
            msg = decode_from_master(await asyncio.wait_for(ws.recv(), 60.0))
            if isinstance(msg, Registered):
                break
        if msg.reconnect_wait_s > 0:
            self.window_s = msg.reconnect_wait_s
        self.sessions += 1
        self.registered.set()
        for alloc in msg.kill:
            self._kill(alloc)

    async def _heartbeat(self, ws: ClientConnection) -> None:
        while True:
            interval = max(0.2, min(5.0, self.window_s / 5))
            try:
                pong = asyncio.ensure_future(await ws.ping())
            except ConnectionClosed:
                return
            done, _ = await asyncio.wait({pong}, timeout=interval * 2)
            if pong not in done:
                self.fleet.rec.count("late_pongs")
            await asyncio.sleep(interval)

    async def _send_loop(self, ws: ClientConnection) -> None:
        while True:
            while not self.outbox:
                self.queued.clear()
                await self.queued.wait()
            await ws.send(encode(self.outbox[0]).decode())
            self.outbox.popleft()

    def _handle(self, msg: object) -> None:
        if isinstance(msg, StartTask):
            self.fleet.start_arrivals.append(time.monotonic())
            if msg.allocation_id in self.tasks or msg.allocation_id in self.finished:
                return  # as the agent: a repeated StartTask is ignored
            self.tasks[msg.allocation_id] = asyncio.create_task(self._task(msg))
        elif isinstance(msg, KillTask):
            self._kill(msg.allocation_id)
        elif isinstance(msg, Registered):
            for alloc in msg.kill:
                self._kill(alloc)

    def _kill(self, alloc: str) -> None:
        task = self.tasks.get(alloc)
        if task is None:
            if alloc not in self.finished:  # as the agent: a kill for an unknown allocation is an exit
                self.finished.add(alloc)
                self.put(TaskExited(allocation_id=alloc, exit_code=None, reason="killed"))
            return
        if not task.done():
            self.fleet.rec.count("kills")
            task.cancel()

    # -- one task --------------------------------------------------------------------------------
    async def _task(self, msg: StartTask) -> None:
        alloc = msg.allocation_id
        fleet = self.fleet
        self.put(TaskStarted(allocation_id=alloc, pid=next(_pids), started_at=time.time()))
        fleet.running.add(alloc)
        info = msg.trial_info or {}
        if "trial_id" in info:
            fleet.trial_ids.append(int(info["trial_id"]))
        exit_code: int | None = KILLED_EXIT
        reason = "killed"
        try:
            if not fleet.churn.is_set():  # the fill (or after the churn): hold the slot until the churn
                await fleet.churn.wait()
                await asyncio.sleep(random.uniform(0, fleet.trial_s))  # spread the first exits evenly
            else:
                await asyncio.sleep(fleet.trial_s)
            if "trial_id" in info:
                await self._report(msg, int(info["trial_id"]), int(info.get("trial_run_id", 0)))
            exit_code, reason = 0, ""
        finally:
            fleet.running.discard(alloc)
            self.tasks.pop(alloc, None)
            self.finished.add(alloc)
            self.put(TaskExited(allocation_id=alloc, exit_code=exit_code, reason=reason))
            fleet.rec.count("exits" if exit_code == 0 else "killed_exits")

    async def _report(self, msg: StartTask, trial_id: int, run_id: int) -> None:
        """A few training rows and a validation at the searcher's length, in one batch."""
        now = datetime.now(UTC).isoformat()
        steps = [self.fleet.max_batches * (i + 1) // self.fleet.metric_rows for i in range(self.fleet.metric_rows)]
        reports: list[dict[str, Any]] = [
            {"group": "training", "stepsCompleted": s, "trialRunId": run_id, "reportTime": now,
             "metrics": {"avgMetrics": {"loss": 1.0 / (s + 1), "lr": 0.01}, "batchMetrics": None}} for s in steps]
        reports.append({"group": "validation", "stepsCompleted": steps[-1], "trialRunId": run_id, "reportTime": now,
                        "metrics": {"avgMetrics": {"loss": random.random()}, "batchMetrics": None}})
        # As the core API's shipper: a connection that fails (a kept-alive one the server closed as it
        # was reused) is retried; a retry is counted, an answer never came after the last.
        for attempt in range(METRIC_ATTEMPTS):
            t0 = time.monotonic()
            try:
                r = await self.fleet.http.post(
                    f"{self.fleet.master_url}/api/v1/trials/{trial_id}/metrics/batch",
                    content=json.dumps({"reports": reports}),
                    headers={TOKEN_HEADER: f"Bearer {msg.session_token}", "Content-Type": "application/json"})
                break
            except httpx.TransportError as exc:
                self.fleet.rec.count("metrics_retries")
                self.fleet.rec.count(f"metrics_retry:{type(exc).__name__}")
                if attempt == METRIC_ATTEMPTS - 1:
                    self.fleet.rec.count("metrics_errors")
                    return
                await asyncio.sleep(0.5 * 2**attempt)
        self.fleet.rec.time("metrics_post", time.monotonic() - t0)
        self.fleet.rec.count(f"http_{r.status_code // 100}xx")
        if r.status_code >= 400:
            self.fleet.rec.count(f"metrics_status_{r.status_code}")
