"""The experiment progress users see: its searcher's, from what its trials have trained.

Answers (experiment list and describe, the job list) compute it fresh from the trials' rows
rather than from a value written on every metric report: ingest stays one UPDATE of trials, and
the number is as current as the last report stored. A COMPLETED experiment is 1; any other,
running or ended, is what its searcher says, so one that ended in ERROR keeps the progress it
reached. The orchestrator also stores it (``experiments.progress``) at each searcher event.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Experiment, Trial
from controlplane.master.orchestration import searcher_runtime
from controlplane.searchers.base import Searcher
from controlplane.searchers.progress import TrialProgress
from controlplane.state import experiment as E


async def trial_progress(session: AsyncSession, exp_ids: Sequence[int]) -> dict[int, dict[str, TrialProgress]]:
    """Each experiment's trials by request id: batches trained and their own reported fraction."""
    out: dict[int, dict[str, TrialProgress]] = {i: {} for i in exp_ids}
    if exp_ids:
        rows = await session.execute(select(Trial.experiment_id, Trial.request_id, Trial.total_batches,
                                            Trial.progress).where(Trial.experiment_id.in_(exp_ids)))
        for exp_id, request_id, batches, reported in rows:
            out[exp_id][request_id] = TrialProgress(int(batches or 0), float(reported or 0.0))
    return out


async def of_searcher(session: AsyncSession, exp: Experiment, searcher: Searcher) -> float:
    if exp.state == E.COMPLETED:
        return 1.0
    if not searcher.uses_trial_progress:
        return searcher.progress()
    return searcher.progress((await trial_progress(session, [exp.id]))[exp.id])


async def of_experiments(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, float]:
    """Every experiment's progress, with one read of the trials of those that need it."""
    searchers = {e.id: searcher_runtime.load(e) for e in exps if e.state != E.COMPLETED}
    trials = await trial_progress(session, [i for i, s in searchers.items() if s.uses_trial_progress])
    return {e.id: searchers[e.id].progress(trials.get(e.id)) if e.id in searchers else 1.0 for e in exps}
