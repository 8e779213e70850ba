"""The job queue: experiments in scheduling order, and the changes users make to it.

Constraints follow Determined's job-queue documentation: priority and ahead-of/behind-of
only under the priority scheduler, weight only under fair share, and only experiments move
between pools. Every update is checked, including that the caller owns the job, before anything
is written: a batch is applied whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, iso
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Allocation, Experiment, Trial, User
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.snapshot import job_priority
from controlplane.master.principals import Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.experiment_requests import MAX_WEIGHT, PatchCheckpointStorage
from controlplane.state import allocation as A
from controlplane.state import experiment as E

JobRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[^\x00]*$")]


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


OPEN_STATES = (E.ACTIVE, E.PAUSED, E.STOPPING_COMPLETED, E.STOPPING_KILLED, E.STOPPING_ERROR)


@dataclass
class JobRow:
    exp: Experiment
    username: str
    requested: int
    allocated: int
    scheduled: bool


def _sort_key(row: JobRow, rt: MasterRuntime) -> tuple:
    pool = rt.settings.pool(row.exp.resource_pool)
    submitted = aware(row.exp.start_time).timestamp()
    if pool is not None and pool.policy.scheduler == "fair_share":
        return (0, 0.0, submitted, row.exp.id)
    return (job_priority(row.exp, pool.policy if pool else None), row.exp.queue_position, submitted, row.exp.id)


async def job_rows(session: AsyncSession, rt: MasterRuntime, pool: str | None = None) -> list[JobRow]:
    q = select(Experiment, User.username).join(User, User.id == Experiment.owner_id).where(
        Experiment.state.in_(OPEN_STATES))
    if pool:
        q = q.where(Experiment.resource_pool == pool)
    exps = (await session.execute(q)).all()
    usage: dict[int, tuple[int, int, bool]] = {}
    allocs = (await session.execute(
        select(Trial.experiment_id, Allocation).join(Trial, Trial.id == Allocation.trial_id)
        .where(Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING))))).all()
    for exp_id, alloc in allocs:
        requested, allocated, scheduled = usage.get(exp_id, (0, 0, False))
        live = alloc.state != A.PENDING
        usage[exp_id] = (requested + alloc.slots_needed,
                         allocated + (sum(len(r["slot_ids"]) for r in gang.resources_of(alloc)) if live else 0),
                         scheduled or live)
    rows = [JobRow(e, u, *usage.get(e.id, (0, 0, False))) for e, u in exps]
    return sorted(rows, key=lambda r: _sort_key(r, rt))


def job_json(row: JobRow, rt: MasterRuntime, jobs_ahead: int) -> dict:
    exp = row.exp
    pool = rt.settings.pool(exp.resource_pool)
    return {
        "jobId": exp.job_id, "type": "TYPE_EXPERIMENT", "entityId": str(exp.id), "name": exp.name,
        "submissionTime": iso(exp.start_time), "username": row.username, "userId": exp.owner_id,
        "resourcePool": exp.resource_pool, "isPreemptible": True,
        "priority": job_priority(exp, pool.policy if pool else None), "weight": exp.weight,
        "requestedSlots": row.requested, "allocatedSlots": row.allocated, "progress": exp.progress,
        "workspaceId": 1,
        "summary": {"state": "STATE_SCHEDULED" if row.scheduled else "STATE_QUEUED", "jobsAhead": jobs_ahead},
    }


def _scheduler_of(rt: MasterRuntime, exp: Experiment) -> str:
    pool = rt.settings.pool(exp.resource_pool)
    return pool.policy.scheduler if pool else "priority"


def check_priority(rt: MasterRuntime, exp: Experiment, value: Any, what: str) -> int:
    if _scheduler_of(rt, exp) != "priority":
        raise BadRequest(f"{what}: priority applies only under the priority scheduler; pool "
                         f"{exp.resource_pool!r} uses fair_share (set a weight instead)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
        raise BadRequest(f"{what}: priority must be an integer from 1 to 99, got {value!r}")
    return value


def check_weight(rt: MasterRuntime, exp: Experiment, value: Any, what: str) -> float:
    if _scheduler_of(rt, exp) != "fair_share":
        raise BadRequest(f"{what}: weight applies only under the fair_share scheduler; pool "
                         f"{exp.resource_pool!r} uses priority (set a priority instead)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_WEIGHT:
        raise BadRequest(f"{what}: weight must be a number > 0 and <= {MAX_WEIGHT:g}, got {value!r}")
    return float(value)


def with_gc_policy(config: dict, change: PatchCheckpointStorage) -> dict:
    """`det e set gc-policy`: the experiment's save_* numbers, in a new config dict (JSON columns
    see only whole-value assignments)."""
    storage = dict(config.get("checkpoint_storage") or {})
    for key in ("save_experiment_best", "save_trial_best", "save_trial_latest"):
        value = getattr(change, key)
        if value is not None:
            storage[key] = value
    return {**config, "checkpoint_storage": storage}


def check_max_slots(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{what}: max_slots must be an integer >= 1, got {value!r}")
    return value


async def experiment_by_job(session: AsyncSession, job_id: str, what: str) -> Experiment:
    exp = await session.scalar(select(Experiment).where(Experiment.job_id == job_id))
    if exp is None and job_id.isdigit() and len(job_id) <= 10 and int(job_id) <= 2**31 - 1:
        exp = await session.get(Experiment, int(job_id))  # the CLI also accepts an experiment id
    if exp is None:
        raise NotFound(f"{what}.jobId: job {job_id} not found")
    if exp.state not in OPEN_STATES:
        raise BadRequest(f"{what}: job {job_id} has already finished ({exp.state})")
    return exp


async def apply_updates(session: AsyncSession, rt: MasterRuntime, principal: Principal,
                        updates: list[QueueControl]) -> list[Allocation]:
    """The whole batch: every job found and owned by the caller before any change; returns the
    live allocations to preempt (moves to another pool), to be signalled once all succeeded."""
    jobs = []
    for i, update in enumerate(updates):
        exp = await experiment_by_job(session, update.job_id, f"updates[{i}]")
        require_owner(principal, Action.EDIT, exp.owner_id, f"job {update.job_id} (experiment {exp.id})")
        jobs.append(exp)
    to_preempt: list[Allocation] = []
    for i, (exp, update) in enumerate(zip(jobs, updates, strict=False)):
        to_preempt += await apply_update(session, rt, exp, update, f"updates[{i}]")
    return to_preempt


async def _neighbour_position(session: AsyncSession, rt: MasterRuntime, exp: Experiment, target: Experiment,
                              ahead: bool) -> float:
    """A queue position right before (ahead) or after the target among jobs of its priority."""
    pool = rt.settings.pool(target.resource_pool)
    prio = job_priority(target, pool.policy if pool else None)
    rows = [r.exp for r in await job_rows(session, rt, target.resource_pool)
            if r.exp.id != exp.id and job_priority(r.exp, pool.policy if pool else None) == prio]
    index = next(i for i, e in enumerate(rows) if e.id == target.id)
    neighbour = (rows[index - 1] if ahead and index > 0
                 else rows[index + 1] if not ahead and index + 1 < len(rows) else None)
    if neighbour is None:
        return target.queue_position - 1.0 if ahead else target.queue_position + 1.0
    return (neighbour.queue_position + target.queue_position) / 2


async def apply_update(session: AsyncSession, rt: MasterRuntime, exp: Experiment, update: QueueControl,
                       what: str) -> list[Allocation]:
    """One v1QueueControl on its (already found and authorized) experiment. Returns the live
    allocations to preempt (a move to another pool)."""
    given = {k: v for k, v in (("priority", update.priority), ("weight", update.weight),
                               ("resourcePool", update.resource_pool), ("aheadOf", update.ahead_of),
                               ("behindOf", update.behind_of)) if v is not None}
    if len(given) != 1:
        raise BadRequest(f"{what}: give exactly one of priority, weight, resourcePool, aheadOf, behindOf "
                         f"(got {', '.join(given) or 'none'})")
    (key, value), = given.items()
    to_preempt: list[Allocation] = []
    if key == "priority":
        exp.priority = check_priority(rt, exp, value, f"{what}.priority")
    elif key == "weight":
        exp.weight = check_weight(rt, exp, value, f"{what}.weight")
    elif key in ("aheadOf", "behindOf"):
        if _scheduler_of(rt, exp) != "priority":
            raise BadRequest(f"{what}.{key}: queue moves apply only under the priority scheduler; pool "
                             f"{exp.resource_pool!r} uses fair_share")
        target = await experiment_by_job(session, str(value), f"{what}.{key}")
        if target.id == exp.id:
            raise BadRequest(f"{what}.{key}: a job cannot move relative to itself")
        if target.resource_pool != exp.resource_pool:
            raise BadRequest(f"{what}.{key}: job {value} is in pool {target.resource_pool!r}, not "
                             f"{exp.resource_pool!r}")
        pool = rt.settings.pool(target.resource_pool)
        exp.priority = job_priority(target, pool.policy if pool else None)
        exp.queue_position = await _neighbour_position(session, rt, exp, target, ahead=key == "aheadOf")
    else:
        to_preempt = await move_to_pool(session, rt, exp, value, f"{what}.resourcePool")
    return to_preempt


async def move_to_pool(session: AsyncSession, rt: MasterRuntime, exp: Experiment, pool_name: Any,
                       what: str) -> list[Allocation]:
    if not isinstance(pool_name, str) or rt.settings.pool(pool_name) is None:
        raise BadRequest(f"{what}: unknown pool {pool_name!r} (pools: {', '.join(rt.settings.pool_names())})")
    slots = int((exp.config.get("resources") or {}).get("slots_per_trial", 1))
    problem = shape_problem(rt, pool_name, slots)
    if problem:
        raise BadRequest(f"{what}: {problem}")
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


def shape_problem(rt: MasterRuntime, pool_name: str, slots_needed: int) -> str | None:
    """Why a gang of this size can never run in the pool's current agents (None: it can, or
    the pool has no agents yet to judge by)."""
    from controlplane.scheduler.gang import shape_error
    from controlplane.scheduler.model import AgentSnapshot

    agents = [AgentSnapshot(agent_id=c.agent_id, pool=c.pool, slot_ids=tuple(s.id for s in c.slots),
                            used_slot_ids=frozenset())
              for c in rt.hub.connections.values() if c.pool == pool_name]
    pool = rt.settings.pool(pool_name)
    if pool is not None and pool.provider:
        # An autoscaled pool: judge by what it can grow to, not by what runs now.
        from controlplane.master.autoscaling.service import scaling_of

        scaling = scaling_of(pool)
        agents += [AgentSnapshot(agent_id=f"(new instance {i + 1})", pool=pool_name,
                                 slot_ids=tuple(range(scaling.slots_per_instance)), used_slot_ids=frozenset())
                   for i in range(scaling.max_instances)]
    if not agents:
        return None
    return shape_error(slots_needed, agents, pool_name)
