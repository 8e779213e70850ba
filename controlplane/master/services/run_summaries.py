"""What experiment and trial answers show of their checkpoints and best trial, for a page at once.

Determined's ``v1Experiment`` carries ``checkpointCount``/``checkpointSize`` and ``bestTrialId``/
``bestTrialSearcherMetric``; its ``trialv1Trial`` ``checkpointCount``/``totalCheckpointSize`` and
``bestCheckpoint``. Each is one grouped (or windowed) query over the page's ids by indexed columns,
never a read per row nor of any metric history: checkpoints counted are those STATE_COMPLETED
(usable: not deleted nor being deleted), a trial's best checkpoint is its completed one at the
steps of its best validation (``trials.best_validation_steps``, which the metric write path keeps),
an experiment's best trial the one with the best searcher metric (ties: the lowest id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Checkpoint, Experiment, Trial
from controlplane.state import checkpoint as CK


@dataclass(frozen=True)
class ExperimentSummary:
    checkpoint_count: int = 0
    checkpoint_size: int = 0
    best_trial_id: int | None = None
    best_trial_metric: float | None = None


@dataclass(frozen=True)
class TrialSummary:
    checkpoint_count: int = 0
    checkpoint_size: int = 0
    best_checkpoint: Checkpoint | None = None


async def experiments(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, ExperimentSummary]:
    ids = [e.id for e in exps]
    if not ids:
        return {}
    grouped: Sequence[Any] = (await session.execute(
        select(Checkpoint.experiment_id, func.count(Checkpoint.uuid), func.sum(Checkpoint.size))
        .where(Checkpoint.experiment_id.in_(ids), Checkpoint.state == CK.COMPLETED)
        .group_by(Checkpoint.experiment_id))).all()
    counts: dict[int, tuple[int, int]] = {exp_id: (n, int(size or 0)) for exp_id, n, size in grouped}
    larger = [e.id for e in exps if not e.searcher.smaller_is_better]
    key = case((Trial.experiment_id.in_(larger), -Trial.searcher_metric_value),
               else_=Trial.searcher_metric_value) if larger else Trial.searcher_metric_value
    ranked = select(Trial.experiment_id, Trial.id, Trial.searcher_metric_value, func.row_number().over(
        partition_by=Trial.experiment_id, order_by=(key.asc(), Trial.id.asc())).label("rn")).where(
        Trial.experiment_id.in_(ids), Trial.searcher_metric_value.is_not(None)).subquery()
    firsts: Sequence[Any] = (await session.execute(select(ranked).where(ranked.c.rn == 1))).all()
    best: dict[int, tuple[int, float]] = {exp_id: (tid, value) for exp_id, tid, value, _ in firsts}
    out = {}
    for exp_id in ids:
        n, size = counts.get(exp_id, (0, 0))
        tid, value = best.get(exp_id, (None, None))
        out[exp_id] = ExperimentSummary(n, size, tid, value)
    return out


async def trials(session: AsyncSession, trial_rows: Sequence[Trial]) -> dict[int, TrialSummary]:
    ids = [t.id for t in trial_rows]
    if not ids:
        return {}
    grouped: Sequence[Any] = (await session.execute(
        select(Checkpoint.trial_id, func.count(Checkpoint.uuid), func.sum(Checkpoint.size))
        .where(Checkpoint.trial_id.in_(ids), Checkpoint.state == CK.COMPLETED)
        .group_by(Checkpoint.trial_id))).all()
    counts: dict[int, tuple[int, int]] = {tid: (n, int(size or 0)) for tid, n, size in grouped}
    best: dict[int, Checkpoint] = {}
    rows: Sequence[Any] = (await session.scalars(
        select(Checkpoint).join(Trial, and_(Trial.id == Checkpoint.trial_id,
                                            Checkpoint.steps_completed == Trial.best_validation_steps))
        .where(Checkpoint.trial_id.in_(ids), Checkpoint.state == CK.COMPLETED)
        .order_by(Checkpoint.trial_id, Checkpoint.report_time.desc()))).all()
    for ckpt in rows:
        if ckpt.trial_id is not None:
            best.setdefault(ckpt.trial_id, ckpt)  # at those steps after a restart: the latest report
    return {tid: TrialSummary(*counts.get(tid, (0, 0)), best.get(tid)) for tid in ids}
