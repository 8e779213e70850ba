"""What a trial's task reports besides metrics (progress, runner state, an early exit) and what it
reads back (its experiment's best searcher metric, its run). Writes are fenced by the reporting
run (``fencing.py``); the API layer only decodes and answers."""

from __future__ import annotations

from sqlalchemy import func, select

from controlplane.master.db.models import Experiment, Trial
from controlplane.master.errors import Conflict, Forbidden, NotFound
from controlplane.master.principals import Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads, fencing


async def set_progress(rt: MasterRuntime, principal: Principal, trial_id: int, progress: float) -> None:
    async with rt.sessions.begin() as session:
        await fencing.update_trial(session, principal, trial_id, {"progress": progress})


async def set_runner_state(rt: MasterRuntime, principal: Principal, trial_id: int, state: str) -> None:
    async with rt.sessions.begin() as session:
        await fencing.update_trial(session, principal, trial_id, {"runner_state": state[:64]})


async def early_exit(rt: MasterRuntime, principal: Principal, trial_id: int, reason: str) -> None:
    """Once per trial; the same reason again is a no-op (a retried request), another one a Conflict."""
    async with rt.sessions.begin() as session:
        await fencing.update_trial(session, principal, trial_id,
                                   {"exit_reason": func.coalesce(Trial.exit_reason, reason)})
        stored = await session.scalar(select(Trial.exit_reason).where(Trial.id == trial_id))
        if stored != reason:
            raise Conflict(f"trial {trial_id} already reported early exit {stored}")


async def best_searcher_metric(rt: MasterRuntime, principal: Principal, exp_id: int) -> float:
    """The experiment's best searcher metric so far; a task reads its own experiment's only."""
    async with rt.sessions() as session:
        if isinstance(principal, TaskPrincipal):
            own = await session.scalar(select(Trial.experiment_id).where(Trial.id == principal.trial_id))
            if own != exp_id:
                raise Forbidden(f"this allocation token is not valid for experiment {exp_id}")
        exp = await experiment_reads.experiment_row(session, exp_id)
        best = (func.min if exp.searcher.smaller_is_better else func.max)(Trial.searcher_metric_value)
        value = await session.scalar(select(best).where(Trial.experiment_id == exp_id))
    if value is None:
        raise NotFound(f"experiment {exp_id} has no validation metric yet")
    return float(value)


async def run_owner(rt: MasterRuntime, run_id: int) -> int:
    """The owner of the experiment a run (Determined's name for a trial) belongs to."""
    async with rt.sessions() as session:
        owner = await session.scalar(select(Experiment.owner_id).join(Trial, Trial.experiment_id == Experiment.id)
                                     .where(Trial.id == run_id))
    if owner is None:
        raise NotFound(f"run {run_id} not found")
    return int(owner)
