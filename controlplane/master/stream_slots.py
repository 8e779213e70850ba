"""Long answers (followed logs, whole-log reads, the SDK's metric streams) take a slot while they run.

A stream may last as long as its trial, so the master admits at most ``max_streams_per_user`` of
them per caller and ``max_streams`` in all (settings); one more is a 429 naming the cap, before
anything is read. A slot is given back when its stream ends however it ends (done, failed, or the
client gone: the stream's generator is closed or cancelled). Slots live in memory: a restart
drops every stream with them.

Streams also take turns: one at a time reads and encodes a page (``StreamSlots.turn``), and the
turn is held a while longer after it (``REST``: as long again as the page took), so however many
run, streams get at most about half of the master's time; the other requests find a database
connection and an event loop that is not busy with them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controlplane.master.errors import TooManyRequests
from controlplane.master.principals import AuthedUser, Principal

if TYPE_CHECKING:
    from controlplane.master.runtime import MasterRuntime


def caller_key(principal: Principal) -> str:
    if isinstance(principal, AuthedUser):
        return f"user {principal.username}"
    return f"task {principal.task_id}"


PAGE_TURNS = 1
REST = 1.0  # after a page, its turn is held this many times as long as the page took


@dataclass
class StreamSlots:
    held: dict[str, int] = field(default_factory=dict)
    total: int = 0
    _turns: asyncio.Semaphore | None = None  # made in the serving loop, on first use
    # What followers of one trial share: (when read, its state), see api/logs.py's _trial_state.
    trial_states: dict[int, tuple[float, str | None]] = field(default_factory=dict)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """One stream's page (its read and its encoding) at a time among ``PAGE_TURNS``."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(PAGE_TURNS)
        async with self._turns:
            started = time.monotonic()
            try:
                yield
            finally:
                await asyncio.sleep((time.monotonic() - started) * REST)

    def take(self, caller: str, per_caller: int, overall: int) -> Slot:
        """A slot for ``caller``, or TooManyRequests (429) naming the cap that is full."""
        mine = self.held.get(caller, 0)
        if mine >= per_caller:
            raise TooManyRequests(f"{caller} already has {mine} open log or metric streams (at most "
                                  f"{per_caller} per user): end one, or read with a limit instead of following")
        if self.total >= overall:
            raise TooManyRequests(f"the master already serves {self.total} log and metric streams (at most "
                                  f"{overall}): try again later")
        self.held[caller] = mine + 1
        self.total += 1
        return Slot(self, caller)

    def _give_back(self, caller: str) -> None:
        left = self.held.get(caller, 0) - 1
        if left > 0:
            self.held[caller] = left
        else:
            self.held.pop(caller, None)
        self.total -= 1


class Slot:
    def __init__(self, slots: StreamSlots, caller: str) -> None:
        self._slots: StreamSlots | None = slots
        self._caller = caller

    def release(self) -> None:
        """Idempotent: the stream's end and the response's background task may both call it."""
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._give_back(self._caller)

    async def hold_while(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``chunks`` as they come; the slot is given back when they end or the client goes."""
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            self.release()


def take_slot(rt: MasterRuntime, principal: Principal) -> Slot:
    s = rt.settings
    return rt.streams.take(caller_key(principal), s.max_streams_per_user, s.max_streams)
