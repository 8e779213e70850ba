"""Messages waiting to go to the master, kept across disconnects.

Everything the tasks produce goes through here; the connection sends from the head and only
removes a message once ``send`` returned, so nothing is lost when the socket drops. The box is
bounded: when full, the oldest ``TaskLogs`` batch is dropped; ``TaskStarted`` and
``TaskExited`` are never dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from controlplane.wire.agent_protocol import AgentMessage, TaskLogs

log = logging.getLogger(__name__)


class Outbox:
    def __init__(self, max_messages: int = 5000) -> None:
        self._items: deque[AgentMessage] = deque()
        self._max = max_messages
        self._changed = asyncio.Event()
        self.dropped_log_batches = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, msg: AgentMessage) -> None:
        self._items.append(msg)
        if len(self._items) > self._max:
            self._drop_oldest_logs()
        self._changed.set()

    def _drop_oldest_logs(self) -> None:
        for i, item in enumerate(self._items):
            if isinstance(item, TaskLogs):
                del self._items[i]
                self.dropped_log_batches += 1
                if self.dropped_log_batches % 100 == 1:
                    log.warning("outbox full: dropped %d log batches so far", self.dropped_log_batches)
                return

    async def peek(self) -> AgentMessage:
        """The head message, waiting until there is one."""
        while not self._items:
            self._changed.clear()
            await self._changed.wait()
        return self._items[0]

    def pop(self) -> None:
        if self._items:
            self._items.popleft()
        self._changed.set()

    async def wait_empty(self, timeout: float) -> bool:
        """True if the box emptied within ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._items:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return not self._items
        return True
