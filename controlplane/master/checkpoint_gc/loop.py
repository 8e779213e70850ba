"""Runs checkpoint GC in the background: for every experiment that ended (found again from the
database after a restart, so nothing is lost), and for every checkpoint still marked for
deletion, retried with backoff until its files are gone."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from sqlalchemy import select

from controlplane.master.background import BackgroundLoop
from controlplane.master.checkpoint_gc import collect as gc
from controlplane.master.db.models import Experiment
from controlplane.master.runtime_core import RuntimeCore

log = logging.getLogger("controlplane.checkpoint_gc")
SCAN_S = 2.0  # how often ended experiments are looked for
LATE_COMMIT_MARGIN = timedelta(minutes=1)
RETRY_BASE_S, RETRY_CAP_S = 5.0, 300.0  # failed deletions: 5 s doubling, capped at 5 min


class CheckpointGcLoop:
    def __init__(self, rt: RuntimeCore) -> None:
        self.rt = rt
        self._collected: set[int] = set()
        self._since: datetime | None = None  # end_time watermark: older experiments are collected
        self._failures = 0
        self._retry_at = 0.0
        # Whether marked rows may exist: at start (a previous master may have left some), after a
        # pass marks or fails, or when told. Draining only then spares a scan every pass.
        self._drain_due = True
        self._loop = BackgroundLoop("checkpoint GC pass", self._pass, log=log, interval_s=SCAN_S,
                                    health=rt.db_health, run_first=True)

    def deletions_pending(self) -> None:
        """Someone else left checkpoints marked for deletion (a `det checkpoint rm` whose files
        could not all be deleted): retry them."""
        self._drain_due = True

    def reopened(self, exp_id: int) -> None:
        """A user continued the experiment: collect it again when it ends again."""
        self._collected.discard(exp_id)

    async def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def run_once(self, now: float) -> gc.DrainReport | None:
        """Collect newly ended experiments, then drain the marked checkpoints unless there are none
        or a failed drain is backing off; None when it did not drain."""
        for exp_id in await self._ended_experiments():
            if await gc.collect_experiment(self.rt, exp_id):
                self._drain_due = True
                self._retry_at = 0.0  # new work: do not wait out an old backoff
            self._collected.add(exp_id)
        if not self._drain_due or now < self._retry_at:
            return None
        report = await gc.drain(self.rt)
        self._drain_due = bool(report.failed)
        if report.failed:
            self._failures += 1
            self._retry_at = now + min(RETRY_CAP_S, RETRY_BASE_S * 2 ** (self._failures - 1))
        else:
            self._failures = 0
        return report

    async def _ended_experiments(self) -> list[int]:
        async with self.rt.sessions() as session:
            q = select(Experiment.id, Experiment.end_time).where(Experiment.state.in_(gc.TERMINAL_EXPERIMENT))
            if self._since is not None:
                # A margin: an experiment whose end_time was set before the last one seen may
                # commit after it.
                q = q.where(Experiment.end_time >= self._since - LATE_COMMIT_MARGIN)
            rows = (await session.execute(q)).all()
        ends = [end for _, end in rows if end is not None]
        if ends:
            self._since = max([*ends, self._since] if self._since else ends)
        return sorted(i for i, _ in rows if i not in self._collected)

    async def _pass(self) -> None:
        await self.run_once(asyncio.get_running_loop().time())
