"""Who may write into a trial, checked inside the transaction that writes.

A task token writes only while its allocation is live and is its trial's current run; a user
writes only into work they own (admins into any). The check is part of the write itself: the
trial row is updated (or, for log lines, share-locked) under the same conditions, so the
orchestrator cannot start the trial's next run between the check and the commit. A re-queued
trial's old copy therefore never writes beside the new one, however late its request arrives
(the token lookup's own check is only a cache-friendly first line).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.authz import Action, Rule, require_owner, rule_for
from controlplane.master.db.models import Allocation, Experiment, Trial
from controlplane.master.errors import Conflict, Forbidden, NotFound
from controlplane.master.principals import AuthedUser, Principal, TaskPrincipal
from controlplane.state import allocation as A


def _conditions(principal: Principal, action: Action) -> list[ColumnElement[bool]]:
    rule = rule_for(principal, action)
    if rule is Rule.ALLOW:
        return []
    if rule is Rule.OWNER and isinstance(principal, AuthedUser):
        return [Trial.experiment_id.in_(select(Experiment.id).where(Experiment.owner_id == principal.id))]
    if rule is Rule.OWN_TASK and isinstance(principal, TaskPrincipal):
        return [Trial.run_id == principal.run_id,
                exists().where(Allocation.id == principal.allocation_id, Allocation.trial_id == Trial.id,
                               Allocation.state != A.TERMINATED)]
    return [Trial.id.is_(None)]  # DENY (the route guard refuses these first)


async def update_trial(session: AsyncSession, principal: Principal, trial_id: int, values: dict[str, Any],
                       action: Action = Action.TASK_REPORT) -> None:
    """UPDATE the trial if ``principal`` may write into it now; otherwise 404/403/409 saying why."""
    # synchronize_session=False: the callers' sessions hold no Trial objects to refresh, and the
    # ORM's evaluation of the WHERE clause in Python cost a few percent of every metric report.
    result = cast(CursorResult[Any], await session.execute(
        update(Trial).where(Trial.id == trial_id, *_conditions(principal, action)).values(**values)
        .execution_options(synchronize_session=False)))
    if result.rowcount == 0:
        await refuse(session, principal, trial_id, action)


async def hold_trial(session: AsyncSession, principal: Principal, trial_id: int,
                     action: Action = Action.TASK_REPORT) -> None:
    """For writes that leave the trial row as is (log lines): check and share-lock it until commit
    (PostgreSQL; SQLite write transactions hold the database lock already)."""
    found = await session.scalar(select(Trial.id).where(Trial.id == trial_id, *_conditions(principal, action))
                                 .with_for_update(read=True, of=Trial))
    if found is None:
        await refuse(session, principal, trial_id, action)


async def hold_allocation(session: AsyncSession, principal: Principal) -> None:
    """A task with no trial (a command, a notebook): its allocation must still be live."""
    if not isinstance(principal, TaskPrincipal):
        return
    state = await session.scalar(select(Allocation.state).where(Allocation.id == principal.allocation_id)
                                 .with_for_update(read=True))
    if state is None or state == A.TERMINATED:
        raise Conflict(f"allocation {principal.allocation_id} has ended: it may no longer report")


async def refuse(session: AsyncSession, principal: Principal, trial_id: int, action: Action) -> None:
    """Raises the reason a write into ``trial_id`` was refused."""
    trial = (await session.execute(select(Trial.run_id, Experiment.owner_id)
                                   .join(Experiment, Experiment.id == Trial.experiment_id)
                                   .where(Trial.id == trial_id))).first()
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    run_id, owner_id = trial
    if not isinstance(principal, TaskPrincipal):
        require_owner(principal, action, owner_id, f"trial {trial_id}")
        raise Forbidden(f"may not write into trial {trial_id}")
    if principal.trial_id != trial_id:
        raise Forbidden(f"this allocation token is not valid for trial {trial_id}")
    if run_id != principal.run_id:
        raise Conflict(f"allocation {principal.allocation_id} is run {principal.run_id} of trial {trial_id}, "
                       f"which has moved on to run {run_id}: the old run may no longer report")
    raise Conflict(f"allocation {principal.allocation_id} has ended: it may no longer report for trial {trial_id}")
