"""What an agent sent, applied in order by a worker of its own, so the WebSocket never waits on
the database.

The socket handler only reads: every message (logs, a task's start or exit, a spot notice, the
registration or disconnect to record) goes to the agent's inbox and the socket goes back to
reading at once, so its pings are answered while the database is down or slow (before, a
handler blocked on the database stopped reading, the pongs stopped, and after 20 s the agents
killed their tasks as orphans). The worker applies the head message; when the database is
unavailable (``outage.cause_of``) it keeps the message and tries again with a growing wait (at
most ``RETRY_MAX_S``), so a task's exit is applied once the database is back, never dropped. The
inbox belongs to the agent, not to one connection: what a dropped connection delivered is still
applied, in order, before what the next one brings.

While exits wait here the reconciler must not call their allocations lost (an agent that
re-registers without a finished task, an agent away past its window): ``pending_exits``.
The inbox holds at most ``MAX_MESSAGES``; past that the oldest log batches are dropped (counted
and logged once per outage), never a start or an exit.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from controlplane.master.db import outage
from controlplane.master.db.outage import DatabaseHealth
from controlplane.wire import agent_protocol as wire

log = logging.getLogger("controlplane.master.agents")

RETRY_MAX_S = 5.0
MAX_MESSAGES = 20_000


@dataclass
class RecordRegistration:
    """A registration answered while the database was unavailable: recorded when it is back."""

    conn: Any  # the AgentConnection it came on
    register: wire.Register


@dataclass
class RecordDisconnect:
    """A connection that ended: recorded after what it delivered."""

    conn: Any


class AgentInbox:
    def __init__(self, agent_id: str, apply: Callable[[object], Awaitable[None]], health: DatabaseHealth,
                 max_messages: int = MAX_MESSAGES) -> None:
        self.agent_id = agent_id
        self._apply = apply
        self._health = health
        self._max = max_messages
        self._items: deque[object] = deque()
        self._worker: asyncio.Task[None] | None = None
        self.dropped_log_batches = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, msg: object) -> None:
        self._items.append(msg)
        if len(self._items) > self._max:
            self._drop_oldest_logs()
        self.idle.clear()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"agent-inbox-{self.agent_id}")

    def pending_exits(self) -> set[str]:
        return {m.allocation_id for m in self._items if isinstance(m, wire.TaskExited)}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()

    def _drop_oldest_logs(self) -> None:
        for i, item in enumerate(self._items):
            if isinstance(item, wire.TaskLogs) and i > 0:  # the head may be being applied
                del self._items[i]
                self.dropped_log_batches += 1
                if self.dropped_log_batches == 1:
                    log.warning("agent %s: %d messages wait for the database; dropping the oldest log batches",
                                self.agent_id, self._max)
                return

    async def _work(self) -> None:
        wait = 0.0
        while self._items:
            msg = self._items[0]
            try:
                await self._apply(msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the socket must outlive any one message
                cause = outage.cause_of(exc)
                if cause is not None:  # kept: applied once the database is back
                    self._health.failed(cause)
                    wait = min(RETRY_MAX_S, max(0.25, wait * 2))
                    await asyncio.sleep(wait)
                    continue
                log.exception("agent %s: applying %s failed; it is dropped", self.agent_id, type(msg).__name__)
            if self._items and self._items[0] is msg:
                self._items.popleft()
            if wait:
                wait = 0.0
                if self.dropped_log_batches:
                    log.warning("agent %s: %d log batches were dropped while the database was unavailable",
                                self.agent_id, self.dropped_log_batches)
                    self.dropped_log_batches = 0
        self.idle.set()
