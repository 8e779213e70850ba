"""The experiment progress users see: its searcher's, from what its trials have trained.

Answers (experiment list and describe, the job list) compute it fresh from the trials' rows
rather than from a value written on every metric report: ingest stays one UPDATE of trials, and
the number is as current as the last report stored. A COMPLETED experiment is 1; any other,
running or ended, is what its searcher says, so one that ended in ERROR keeps the progress it
reached. The orchestrator also stores it (``experiments.progress``) at each searcher event, with
its basis (``experiments.progress_basis``: ``searchers/progress.py``), so a listing computes each
row's progress from the basis and its counted trials' rows without rebuilding any searcher. Only
an experiment without a basis (never started, or last saved by an older master whose snapshot
this version could not load) loads its searcher, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Experiment, Trial
from controlplane.master.orchestration import searcher_runtime
from controlplane.searchers.base import Searcher
from controlplane.searchers.progress import TrialProgress, basis_counts_trials, from_basis
from controlplane.state import experiment as E

log = logging.getLogger(__name__)


MAX_NAMED_TRIALS = 1000  # request ids a listing names in its read of trials; more: all their trials


async def trial_progress(session: AsyncSession, exp_ids: Sequence[int],
                         request_ids: Sequence[str] | None = None) -> dict[int, dict[str, TrialProgress]]:
    """Each experiment's trials by request id (those of ``request_ids`` if given): batches trained
    and their own reported fraction."""
    out: dict[int, dict[str, TrialProgress]] = {i: {} for i in exp_ids}
    if exp_ids:
        q = select(Trial.experiment_id, Trial.request_id, Trial.total_batches, Trial.progress).where(
            Trial.experiment_id.in_(exp_ids))
        if request_ids is not None:
            q = q.where(Trial.request_id.in_(request_ids))
        for exp_id, request_id, batches, reported in await session.execute(q):
            out[exp_id][request_id] = TrialProgress(int(batches or 0), float(reported or 0.0))
    return out


async def of_searcher(session: AsyncSession, exp: Experiment, searcher: Searcher) -> float:
    if exp.state == E.COMPLETED:
        return 1.0
    if not searcher.uses_trial_progress:
        return searcher.progress()
    counting = basis_counts_trials(searcher.progress_basis())
    named = counting if len(counting) <= MAX_NAMED_TRIALS else None
    return searcher.progress((await trial_progress(session, [exp.id], named))[exp.id])


def _searcher(exp_id: int, config: Any, searcher_state: Any) -> Searcher | None:
    try:
        return searcher_runtime.load_from(config, searcher_state)
    except (ValueError, KeyError, TypeError):  # ConfigError is a ValueError
        # A stored config this version no longer reads must not fail a whole listing: the value
        # stored at its last searcher event stands in.
        log.warning("experiment %s: searcher not loadable, showing its stored progress", exp_id, exc_info=True)
        return None


async def _without_basis(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, Searcher | None]:
    """The searchers of experiments that have no stored basis, loaded (their snapshots read here:
    a listing leaves ``searcher_state`` unloaded)."""
    if not exps:
        return {}
    rows: Sequence[Any] = (await session.execute(select(Experiment.id, Experiment.config, Experiment.searcher_state)
                                                 .where(Experiment.id.in_([e.id for e in exps])))).all()
    return {exp_id: _searcher(exp_id, config, state) for exp_id, config, state in rows}


async def of_experiments(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, float]:
    """Every experiment's progress: from its stored basis (``searchers/progress.from_basis``) with one
    read of the trials it counts, or from its searcher where it has none."""
    open_exps = [e for e in exps if e.state != E.COMPLETED]
    bases = {e.id: e.progress_basis for e in open_exps if isinstance(e.progress_basis, dict)}
    searchers = await _without_basis(session, [e for e in open_exps if e.id not in bases])
    counting = {i: basis_counts_trials(b) for i, b in bases.items()}
    names = sorted({r for rs in counting.values() for r in rs})
    trials = await trial_progress(session, [i for i, rs in counting.items() if rs],
                                  names if len(names) <= MAX_NAMED_TRIALS else None)
    loaded = [i for i, s in searchers.items() if s is not None and s.uses_trial_progress]
    trials |= await trial_progress(session, loaded)
    out = {}
    for e in exps:
        if e.state == E.COMPLETED:
            out[e.id] = 1.0
        elif e.id in bases:
            out[e.id] = from_basis(bases[e.id], trials.get(e.id))
        elif (searcher := searchers.get(e.id)) is None:
            out[e.id] = e.progress
        else:
            out[e.id] = searcher.progress(trials.get(e.id))
    return out
