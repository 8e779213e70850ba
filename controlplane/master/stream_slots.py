"""Long answers (followed logs, whole-log reads, the SDK's metric streams) take a slot while they run.

A stream may last as long as its trial, so the master admits at most ``max_streams_per_user`` of
them per caller and ``max_streams`` in all (settings); one more is a 429 naming the cap, before
anything is read. A slot is given back when its stream ends however it ends (done, failed, or the
client gone: the stream's generator is closed or cancelled). Slots live in memory: a restart
drops every stream with them.

Streams also take turns: one at a time reads and encodes a page (``StreamSlots.turn``), and while
other requests are being answered (``count_requests`` counts them) the turn is held after the page
until they are done, for at most ``REST`` times as long as the page took: however many streams run,
a request finds a database connection and an event loop that is not busy with them, and a stream
alone on a quiet master runs at full speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.master.errors import TooManyRequests
from controlplane.master.principals import AuthedUser, Principal

if TYPE_CHECKING:
    from controlplane.master.settings import MasterSettings


def caller_key(principal: Principal) -> str:
    if isinstance(principal, AuthedUser):
        return f"user {principal.username}"
    return f"task {principal.task_id}"


PAGE_TURNS = 1
REST = 2.0  # while other requests run, a page's turn is held up to this many times as long as it took
PAGE_KEEP_S = 5.0
PAGE_KEEP_BYTES = 32 * 1024 * 1024
_in_flight = 0  # HTTP requests of this process being answered, streams included (count_requests)


def count_requests(app: Any) -> Any:
    """ASGI middleware: counts the requests in flight, so streams know when others wait on them."""

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        global _in_flight
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        _in_flight += 1
        try:
            await app(scope, receive, send)
        finally:
            _in_flight -= 1

    return counted


@dataclass
class StreamSlots:
    held: dict[str, int] = field(default_factory=dict)
    total: int = 0
    _turns: asyncio.Semaphore | None = None  # made in the serving loop, on first use
    # What followers of one trial share: (when read, its state), see api/logs.py's _trial_state.
    trial_states: dict[int, tuple[float, str | None]] = field(default_factory=dict)
    # Per trial, how many times lines were stored (``logged``): a page read under one count is good
    # for every reader with the same query until lines come again (``shared_page``).
    log_counts: dict[int, int] = field(default_factory=dict)
    _pages: dict[tuple[Any, ...], tuple[float, float, bytes, int, int | None]] = field(default_factory=dict)
    _page_bytes: int = 0

    def logged(self, trial_id: int) -> None:
        """The ingest path stored lines of ``trial_id`` (called after the commit)."""
        self.log_counts[trial_id] = self.log_counts.get(trial_id, 0) + 1

    def shared_page(self, key: tuple[Any, ...]) -> tuple[float, tuple[bytes, int, int | None]] | None:
        """(what reading it cost, the page) if one is kept under ``key``."""
        hit = self._pages.get(key)
        return None if hit is None else (hit[1], (hit[2], hit[3], hit[4]))

    def keep_page(self, key: tuple[Any, ...], page: tuple[bytes, int, int | None], cost: float) -> None:
        """Pages of the last ``PAGE_KEEP_S``, at most ``PAGE_KEEP_BYTES`` in all (oldest dropped)."""
        now = time.monotonic()
        old = self._pages.pop(key, None)
        if old is not None:
            self._page_bytes -= len(old[2])
        while self._pages:  # oldest first: insertion order is time order
            first = next(iter(self._pages))
            at, data = self._pages[first][0], self._pages[first][2]
            if self._page_bytes + len(page[0]) <= PAGE_KEEP_BYTES and now - at <= PAGE_KEEP_S:
                break
            del self._pages[first]
            self._page_bytes -= len(data)
        if len(page[0]) <= PAGE_KEEP_BYTES:
            self._pages[key] = (now, cost, *page)
            self._page_bytes += len(page[0])

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[list[float]]:
        """One stream's page (its read and its encoding) at a time among ``PAGE_TURNS``. The body may
        say what its page costs (``cost[0]``: a shared page costs its sending what it cost to read),
        else the time it took counts."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(PAGE_TURNS)
        async with self._turns:
            started, cost = time.monotonic(), [0.0]
            try:
                yield cost
            finally:
                now = time.monotonic()
                until = now + max(now - started, cost[0]) * REST
                while _in_flight > self.total and time.monotonic() < until:  # requests other than streams
                    await asyncio.sleep(0.005)

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


def take_slot(streams: StreamSlots, settings: MasterSettings, principal: Principal) -> Slot:
    """A stream slot for ``principal`` under the master's caps (429 naming the cap when full)."""
    return streams.take(caller_key(principal), settings.max_streams_per_user, settings.max_streams)
