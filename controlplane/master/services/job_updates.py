"""`POST /api/v1/job-queues`: a batch of changes to the job queue, applied whole or not at all.

Two phases. ``check`` resolves every job the batch names (full ids, 8+ character prefixes or
experiment ids, see ``job_refs``), checks that the caller owns each job it changes, and checks each
change where the job will be by then (moving a job to a fair-share pool makes a later weight change
of it in the same batch valid); it writes nothing. ``apply`` then makes every change in order in the
caller's transaction, and returns the live allocations to preempt once it commits.

Constraints follow Determined's job-queue documentation: priority and ahead-of/behind-of only under
the priority scheduler, weight only under fair share, and only experiments move between pools.
Every kind of job is changed alike (an experiment, an OpenPAI job, a command, shell or notebook:
their rows carry the same ``priority`` and ``queue_position``), except that only experiments have
a weight here and only experiments change pool (Determined's rule); the others' are a 400 naming
the field and the job's type.
Moving a job ahead of another only changes its priority and queue position; whether running work
gives way for it is the scheduler's decision (``controlplane/scheduler/priority.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Allocation, Experiment, Trial
from controlplane.master.errors import BadRequest
from controlplane.master.principals import Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import job_refs
from controlplane.master.services.experiment_requests import MAX_WEIGHT
from controlplane.master.services.jobs import (
    QueueJob,
    check_priority,
    check_weight,
    describe,
    is_open,
    job_rows,
    priority_of,
    scheduler_of,
    shape_problem,
    what_it_is,
)
from controlplane.state import allocation as A

JobRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[^\x00]*$")]
KEYS = ("priority", "weight", "resourcePool", "aheadOf", "behindOf")


class QueueControl(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1QueueControl``: one job and exactly one change."""

    job_id: JobRef
    # 1..99: checked with the pool's scheduler
    priority: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)] | None = None
    weight: Annotated[float, msgspec.Meta(gt=0, le=MAX_WEIGHT)] | None = None
    resource_pool: Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00]*$")] | None = None
    ahead_of: JobRef | None = None
    behind_of: JobRef | None = None


class UpdateJobQueueRequest(msgspec.Struct, rename="camel", kw_only=True):
    updates: Annotated[list[QueueControl], msgspec.Meta(min_length=1, max_length=1000)]


@dataclass(frozen=True)
class Change:
    """One checked update: ``key`` is its v1QueueControl field; ``target`` the job it moves
    relative to (aheadOf/behindOf)."""

    job: QueueJob
    key: str
    value: Any
    target: QueueJob | None = None


def the_change(update: QueueControl, what: str) -> tuple[str, Any]:
    given = {k: v for k, v in zip(KEYS, (update.priority, update.weight, update.resource_pool, update.ahead_of,
                                         update.behind_of), strict=True) if v is not None}
    if len(given) != 1:
        raise BadRequest(f"{what}: give exactly one of priority, weight, resourcePool, aheadOf, behindOf "
                         f"(got {', '.join(given) or 'none'})")
    ((key, value),) = given.items()
    return key, value


def _open(job: QueueJob, ref: str, field: str) -> QueueJob:
    if not is_open(job):
        raise BadRequest(f"{field}: job {ref} has already finished ({job.state})")
    return job


async def check(session: AsyncSession, rt: MasterRuntime, principal: Principal,
                updates: list[QueueControl]) -> list[Change]:
    """Every update of the batch checked, in order, with nothing written: the changes to apply."""
    jobs = []
    for i, update in enumerate(updates):  # every job found and owned before any rule is judged
        job = _open(await job_refs.resolve(session, update.job_id, f"updates[{i}].jobId"), update.job_id,
                    f"updates[{i}].jobId")
        require_owner(principal, Action.EDIT, job.owner_id, describe(job))
        jobs.append(job)
    pools: dict[str, str] = {}  # each job's pool (by job id) as the batch leaves it so far
    changes = []
    for i, (job, update) in enumerate(zip(jobs, updates, strict=True)):
        what = f"updates[{i}]"
        key, value = the_change(update, what)
        field = f"{what}.{key}"
        pool = pools.get(job.job_id, job.resource_pool)
        target = None
        if key == "priority":
            check_priority(rt, pool, value, field)
        elif key == "weight":
            if not isinstance(job, Experiment):
                raise BadRequest(f"{field}: only experiments have a weight here; job {job.job_id} is "
                                 f"{what_it_is(job)}")
            check_weight(rt, pool, value, field)
        elif key == "resourcePool":
            if not isinstance(job, Experiment):
                raise BadRequest(f"{field}: only experiments move to another resource pool; job {job.job_id} is "
                                 f"{what_it_is(job)}")
            check_pool(rt, job, value, field)
            pools[job.job_id] = value
        else:
            if scheduler_of(rt, pool) != "priority":
                raise BadRequest(f"{field}: queue moves apply only under the priority scheduler; pool "
                                 f"{pool!r} uses fair_share")
            target = _open(await job_refs.resolve(session, value, field), value, field)
            if target.job_id == job.job_id:
                raise BadRequest(f"{field}: a job cannot move relative to itself")
            target_pool = pools.get(target.job_id, target.resource_pool)
            if target_pool != pool:
                raise BadRequest(f"{field}: job {value} is in pool {target_pool!r}, not {pool!r}")
        changes.append(Change(job, key, value, target))
    return changes


async def apply(session: AsyncSession, rt: MasterRuntime, changes: list[Change]) -> list[Allocation]:
    """Makes the checked changes in order; returns the live allocations of jobs moved to another
    pool, to be preempted once the transaction commits (they come back in the new pool)."""
    to_preempt: list[Allocation] = []
    for change in changes:
        job = change.job
        if change.key == "priority":
            job.priority = change.value
        elif change.key == "weight":
            assert isinstance(job, Experiment)  # checked
            job.weight = float(change.value)
        elif change.key == "resourcePool":
            assert isinstance(job, Experiment)  # checked
            to_preempt += await move_to_pool(session, job, change.value)
        else:
            assert change.target is not None
            pool = rt.settings.pool(change.target.resource_pool)
            job.priority = priority_of(change.target, pool.policy if pool else None)
            job.queue_position = await _neighbour_position(session, rt, job, change.target,
                                                           ahead=change.key == "aheadOf")
        await session.flush()  # the next change sees this one in the queue
    return to_preempt


async def _neighbour_position(session: AsyncSession, rt: MasterRuntime, job: QueueJob, target: QueueJob,
                              ahead: bool) -> float:
    """A queue position right before (ahead) or after the target among jobs of its priority."""
    pool = rt.settings.pool(target.resource_pool)
    prio = priority_of(target, pool.policy if pool else None)
    rows = [r for r in await job_rows(session, rt, target.resource_pool)
            if r.job_id != job.job_id and r.priority == prio]
    index = next(i for i, r in enumerate(rows) if r.job_id == target.job_id)
    neighbour = (rows[index - 1] if ahead and index > 0
                 else rows[index + 1] if not ahead and index + 1 < len(rows) else None)
    if neighbour is None:
        return target.queue_position - 1.0 if ahead else target.queue_position + 1.0
    return (neighbour.queue_position + target.queue_position) / 2


def check_pool(rt: MasterRuntime, exp: Experiment, pool_name: Any, field: str) -> None:
    if not isinstance(pool_name, str) or rt.settings.pool(pool_name) is None:
        raise BadRequest(f"{field}: unknown pool {pool_name!r} (pools: {', '.join(rt.settings.pool_names())})")
    slots = int((exp.config.get("resources") or {}).get("slots_per_trial", 1))
    problem = shape_problem(rt, pool_name, slots)
    if problem:
        raise BadRequest(f"{field}: {problem}")


async def move_to_pool(session: AsyncSession, exp: Experiment, pool_name: str) -> list[Allocation]:
    exp.resource_pool = pool_name
    config = dict(exp.config)
    config["resources"] = {**(config.get("resources") or {}), "resource_pool": pool_name}
    exp.config = config
    allocs = (await session.scalars(select(Allocation).join(Trial, Trial.id == Allocation.trial_id).where(
        Trial.experiment_id == exp.id, Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING))))).all()
    for alloc in allocs:
        alloc.resource_pool = pool_name
    # Running trials checkpoint and come back in the new pool.
    return [a for a in allocs if a.state != A.PENDING]
