"""The experiment progress users see: its searcher's, from what its trials have trained.

Answers (experiment list and describe, the job list) compute it fresh from the trials' rows
rather than from a value written on every metric report: ingest stays one UPDATE of trials, and
the number is as current as the last report stored. A COMPLETED experiment is 1; any other,
running or ended, is what its searcher says, so one that ended in ERROR keeps the progress it
reached. The orchestrator also stores it (``experiments.progress``) at each searcher event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Experiment, Trial
from controlplane.master.orchestration import searcher_runtime
from controlplane.searchers.base import Searcher
from controlplane.searchers.progress import TrialProgress
from controlplane.state import experiment as E

log = logging.getLogger(__name__)


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


def _searcher(exp: Experiment) -> Searcher | None:
    try:
        return searcher_runtime.load(exp)
    except (ValueError, KeyError, TypeError):  # ConfigError is a ValueError
        # A stored config this version no longer reads must not fail a whole listing: the value
        # stored at its last searcher event stands in.
        log.warning("experiment %s: searcher not loadable, showing its stored progress", exp.id, exc_info=True)
        return None


async def of_experiments(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, float]:
    """Every experiment's progress, with one read of the trials of those that need it."""
    searchers = {e.id: _searcher(e) for e in exps if e.state != E.COMPLETED}
    trials = await trial_progress(session, [i for i, s in searchers.items() if s is not None and s.uses_trial_progress])
    out = {}
    for e in exps:
        searcher = searchers.get(e.id)
        if e.state == E.COMPLETED:
            out[e.id] = 1.0
        elif searcher is None:
            out[e.id] = e.progress
        else:
            out[e.id] = searcher.progress(trials.get(e.id))
    return out
