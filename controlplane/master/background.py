"""The master's one shape of background loop: start, stop, wake, an interval, backoff on error.

Every loop of the master (the orchestrator's ticks, the autoscaler's, the checkpoint GC's passes,
the metric writers) is a `BackgroundLoop` over one ``step``. A step that fails is logged once, as
one line with its traceback; a step that fails because the database is unreachable is not logged
(``DatabaseHealth`` says so once per outage, ``db/outage.py``) and, where the loop asks for it, the
next one waits longer, doubling up to ``backoff_max_s``. A step returns True when there is more to
do at once (a writer with a queue), else the loop waits ``interval_s`` or until woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from controlplane.common.aio import wait_for_wake
from controlplane.master.db import outage
from controlplane.master.db.outage import DatabaseHealth

Step = Callable[[], Awaitable[bool | None]]


def note_failure(log: logging.Logger, what: str, exc: BaseException, health: DatabaseHealth | None) -> bool:
    """One failed step: a traceback in the log, or, for an unreachable database, a word to
    ``health`` (which logs the outage once). Returns whether it was the database."""
    cause = outage.cause_of(exc)
    if cause is None or health is None:
        log.error("%s failed", what, exc_info=exc)
        return False
    health.failed(cause)
    return True


class BackgroundLoop:
    def __init__(self, name: str, step: Step, *, log: logging.Logger, interval_s: float | None,
                 health: DatabaseHealth | None = None, run_first: bool = False, min_gap_s: float = 0.0,
                 backoff_max_s: float | None = None) -> None:
        """``interval_s``: between steps (None: only when woken). ``run_first``: the first step at
        once, not after the first wait. ``min_gap_s``: a floor between steps however often it is
        woken. ``backoff_max_s``: while the database is unreachable, waits between steps double from
        ``interval_s`` up to this (None: the usual interval)."""
        self.name = name
        self._step = step
        self._log = log
        self._interval_s = interval_s
        self._health = health
        self._run_first = run_first
        self._min_gap_s = min_gap_s
        self._backoff_max_s = backoff_max_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def wake(self) -> None:
        """Run the next step now (after ``min_gap_s``) instead of at the end of the interval."""
        self._wake.set()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _wait(self, backoff: float) -> None:
        if self._min_gap_s:
            await asyncio.sleep(self._min_gap_s)  # bounds the work (cloud calls) under a storm of wakes
        if self._interval_s is None:
            await self._wake.wait()
            self._wake.clear()
        else:
            await wait_for_wake(self._wake, self._interval_s - self._min_gap_s)
        if backoff:
            await asyncio.sleep(backoff)

    async def _run(self) -> None:
        backoff = 0.0
        more = self._run_first
        while True:
            if not more:
                await self._wait(backoff)
            try:
                more = bool(await self._step())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad step must not stop the loop for good
                more = False
                if note_failure(self._log, self.name, exc, self._health) and self._backoff_max_s is not None:
                    backoff = min(self._backoff_max_s, max(self._interval_s or 0.0, backoff * 2))
                continue
            backoff = 0.0
            if self._health is not None:
                self._health.succeeded()
