"""State changes a user asks for beyond pause/activate/kill of an experiment: kill one trial
(Determined's KillTrial), continue an ended experiment (ContinueExperiment) and the state moves of
deleting one (DeleteExperiment).

Each runs as one orchestrator transaction under its lock, through ``transitions.move``, with the
orchestrator's own helpers, exactly as its event handlers do: this module holds the requests that
are not agent events so the orchestrator stays one concern long.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select

from controlplane.master.authz import Action, require_owner
from controlplane.master.checkpoint_gc import collect as gc
from controlplane.master.db.models import (
    Allocation,
    Checkpoint,
    Experiment,
    ExperimentContext,
    Metric,
    StateTransition,
    TaskLog,
    Trial,
    TrialMetricSummary,
)
from controlplane.master.errors import BadRequest, Conflict, NotFound
from controlplane.master.orchestration import lifecycle, searcher_runtime
from controlplane.master.orchestration.transitions import move
from controlplane.master.principals import Principal
from controlplane.searchers.planned import PlannedSearcher
from controlplane.state import checkpoint as CK
from controlplane.state import experiment as E
from controlplane.state import trial as T

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from controlplane.master.orchestration.orchestrator import Orchestrator

ENDED = (E.COMPLETED, E.CANCELED, E.ERROR)
DELETABLE = (*ENDED, E.DELETING, E.DELETE_FAILED)  # DELETING: a delete cut short by a master restart
CONTINUABLE_SEARCHERS = ("single", "grid", "random")
COMPLETED_CHECKPOINT = CK.COMPLETED


async def kill_trial(orch: Orchestrator, principal: Principal, trial_id: int) -> None:
    """``det trial kill``: the trial stops (CANCELED); its experiment goes on with the others. A
    user's cancel is no failure (Determined's searcher.go): an experiment whose every trial was
    killed so ends CANCELED, not ERROR. Killing a trial that has ended, or is being killed, changes
    nothing."""
    async with orch.transaction() as session:
        trial = await session.get(Trial, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        exp = await orch._experiment(session, trial.experiment_id)
        require_owner(principal, Action.EDIT, exp.owner_id, f"trial {trial_id} (experiment {exp.id})")
        if T.TRIAL.is_terminal(trial.state) or trial.state == T.STOPPING_KILLED:
            return
        await orch._kill_trial(session, trial, "killed by a user")
        if T.TRIAL.is_terminal(trial.state):  # it had no process: it ended now, so the searcher hears now
            if not E.EXPERIMENT.is_terminal(exp.state) and exp.state not in (E.STOPPING_KILLED, E.STOPPING_CANCELED):
                searcher = searcher_runtime.load(exp)
                await orch._apply_actions(session, exp, searcher,
                                          searcher.on_trial_exited(trial.request_id, "canceled"))
            await orch._maybe_finish(session, exp)
        # else: its process is being killed; its exit ends it and tells the searcher (_allocation_ended)
    orch.wake()


def check_continuable(exp: Experiment) -> None:
    """Determined's rules, checked before the new config is even parsed."""
    if exp.state not in ENDED:
        raise Conflict(f"state: experiment {exp.id} is {exp.state}; only an ended experiment (COMPLETED, CANCELED "
                       "or ERROR) can be continued")
    name = exp.searcher.name
    if name not in CONTINUABLE_SEARCHERS:
        raise BadRequest(f"id: experiment {exp.id} uses the {name} searcher; only single, grid and random "
                         "experiments can be continued")


async def _resume_point(session: AsyncSession, trial: Trial) -> str | None:
    """The checkpoint a continued trial resumes from: its latest, unless that one has been deleted
    since (then its newest completed one, or none: it starts over)."""
    if trial.latest_checkpoint:
        current = await session.get(Checkpoint, trial.latest_checkpoint)
        if current is not None and current.state == COMPLETED_CHECKPOINT:
            return current.uuid
    return await session.scalar(select(Checkpoint.uuid).where(
        Checkpoint.trial_id == trial.id, Checkpoint.state == COMPLETED_CHECKPOINT)
        .order_by(Checkpoint.steps_completed.desc(), Checkpoint.report_time.desc()).limit(1))


async def continue_experiment(orch: Orchestrator, principal: Principal, exp_id: int, config: dict[str, Any],
                              username: str) -> None:
    """ContinueExperiment: the experiment is active again with ``config`` (the override merged
    over its active config, validated by the caller). A ``single`` experiment's trial runs again
    whatever its end; a grid or random search runs its trials that did not complete (refused if
    every one did). Each resumes from its latest checkpoint with its restarts at zero."""
    async with orch.transaction() as session:
        exp = await orch._experiment(session, exp_id)
        require_owner(principal, Action.EDIT, exp.owner_id, f"experiment {exp_id}")
        check_continuable(exp)  # again, under the lock: it may have changed since the caller looked
        trials = list((await session.scalars(select(Trial).where(Trial.experiment_id == exp_id)
                                             .order_by(Trial.id))).all())
        if config["searcher"]["name"] == "single":
            again = trials[:1]
        else:
            again = [t for t in trials if t.state != T.COMPLETED]
            if exp.state == E.COMPLETED and not again:
                raise Conflict(f"state: experiment {exp_id} has completed every trial; there is nothing to continue")
        exp.config = config
        move(session, exp, E.ACTIVE, f"continued by {username}")
        exp.end_time = None
        exp.progress = 0.0
        exp.queue_position = time.time()  # to the back of its priority, as a new job
        for trial in again:
            move(session, trial, T.QUEUED, f"its experiment was continued by {username}")
            trial.restarts, trial.end_time = 0, None
            trial.latest_checkpoint = await _resume_point(session, trial)
            lifecycle.queue_allocation(session, exp, trial, "its experiment was continued")
        searcher = searcher_runtime.load(exp)
        assert isinstance(searcher, PlannedSearcher)  # check_continuable allows only these
        exp.searcher_state = {**(exp.searcher_state or {}), "shutdown": False, "failure": False,
                             "cancel": False}
        await orch._apply_actions(session, exp, searcher, searcher.reopen([t.request_id for t in again]))
        await orch._maybe_finish(session, exp)
    orch.wake()


async def begin_delete(orch: Orchestrator, principal: Principal, exp_id: int, username: str) -> list[str]:
    """The experiment becomes DELETING and every checkpoint of it is marked for deletion; returns
    those whose files are to go. Refused (409) unless it has ended, and while one of its
    checkpoints is in the model registry."""
    async with orch.transaction() as session:
        exp = await orch._experiment(session, exp_id)
        require_owner(principal, Action.EDIT, exp.owner_id, f"experiment {exp_id}")
        if exp.state not in DELETABLE:
            raise Conflict(f"state: experiment {exp_id} is {exp.state}; only an ended experiment can be deleted "
                           "(kill it first)")
        doomed = await gc.mark_experiment(session, exp_id, f"experiment {exp_id} deleted by {username}")
        move(session, exp, E.DELETING, f"deleted by {username}")
    return doomed


async def finish_delete(orch: Orchestrator, exp_id: int, failed: dict[str, str]) -> str | None:
    """Once its checkpoints' files are gone, the experiment's rows go in one transaction: its trials,
    allocations, metrics, checkpoints, logs and their state history. If some files could not be
    deleted, it becomes DELETE_FAILED (those checkpoints stay marked and GC retries them; deleting
    it again finishes the job). Returns why it failed, or None once it is gone."""
    async with orch.transaction() as session:
        exp = await session.get(Experiment, exp_id, with_for_update=not orch._sqlite)
        if exp is None:
            return None  # a concurrent delete finished first
        left = (await session.scalars(select(Checkpoint.uuid).where(
            Checkpoint.experiment_id == exp_id, Checkpoint.state != CK.DELETED).limit(5))).all()
        if failed or left or exp.state != E.DELETING:
            first = next(iter(failed.values()), None) or (
                f"checkpoint(s) {', '.join(left)} still have files" if left else f"it is {exp.state}")
            if exp.state == E.DELETING:
                move(session, exp, E.DELETE_FAILED, f"checkpoint files could not be deleted: {first}")
            return first
        await _delete_rows(session, exp)
    return None


async def _delete_rows(session: AsyncSession, exp: Experiment) -> None:
    trial_ids = list((await session.scalars(select(Trial.id).where(Trial.experiment_id == exp.id))).all())
    alloc_ids = list((await session.scalars(select(Allocation.id).where(Allocation.trial_id.in_(trial_ids))))
                     .all()) if trial_ids else []
    ckpt_ids = list((await session.scalars(select(Checkpoint.uuid).where(Checkpoint.experiment_id == exp.id))).all())
    history = [("experiment", [str(exp.id)]), ("trial", [str(t) for t in trial_ids]),
               ("allocation", alloc_ids), ("checkpoint", ckpt_ids)]
    for entity, ids in history:
        for chunk in _chunks(ids):
            await session.execute(delete(StateTransition).where(StateTransition.entity == entity,
                                                                StateTransition.entity_id.in_(chunk)))
    for chunk in _chunks(trial_ids):
        await session.execute(delete(TaskLog).where(TaskLog.trial_id.in_(chunk)))
        await session.execute(delete(Metric).where(Metric.trial_id.in_(chunk)))
        await session.execute(delete(TrialMetricSummary).where(TrialMetricSummary.trial_id.in_(chunk)))
        await session.execute(delete(Allocation).where(Allocation.trial_id.in_(chunk)))
    await session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == exp.id))
    await session.execute(delete(Trial).where(Trial.experiment_id == exp.id))
    await session.execute(delete(ExperimentContext).where(ExperimentContext.experiment_id == exp.id))
    await session.delete(exp)


def _chunks(ids: list[Any], size: int = 500) -> list[list[Any]]:
    """IN lists of bounded length (SQLite caps bound parameters)."""
    return [ids[i:i + size] for i in range(0, len(ids), size)]
