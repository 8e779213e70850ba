"""The job queue: experiments in scheduling order, as `det job list` shows them, and the
scheduler rules that changes to it must keep (priority only under the priority scheduler, weight
only under fair share). The changes themselves are ``job_updates``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, iso
from controlplane.master.db.models import Allocation, Experiment, Trial, User
from controlplane.master.errors import BadRequest
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.snapshot import job_priority
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.experiment_requests import MAX_WEIGHT, PatchCheckpointStorage
from controlplane.state import allocation as A
from controlplane.state import experiment as E

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


def job_json(row: JobRow, rt: MasterRuntime, jobs_ahead: int, progress: float, workspace_id: int = 1) -> dict:
    exp = row.exp
    pool = rt.settings.pool(exp.resource_pool)
    return {
        "jobId": exp.job_id, "type": "TYPE_EXPERIMENT", "entityId": str(exp.id), "name": exp.name,
        "submissionTime": iso(exp.start_time), "username": row.username, "userId": exp.owner_id,
        "resourcePool": exp.resource_pool, "isPreemptible": True,
        "priority": job_priority(exp, pool.policy if pool else None), "weight": exp.weight,
        "requestedSlots": row.requested, "allocatedSlots": row.allocated, "progress": progress,
        "workspaceId": workspace_id,
        "summary": {"state": "STATE_SCHEDULED" if row.scheduled else "STATE_QUEUED", "jobsAhead": jobs_ahead},
    }


def scheduler_of(rt: MasterRuntime, pool_name: str) -> str:
    pool = rt.settings.pool(pool_name)
    return pool.policy.scheduler if pool else "priority"


def check_priority(rt: MasterRuntime, pool_name: str, value: Any, what: str) -> int:
    if scheduler_of(rt, pool_name) != "priority":
        raise BadRequest(f"{what}: priority applies only under the priority scheduler; pool "
                         f"{pool_name!r} uses fair_share (set a weight instead)")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
        raise BadRequest(f"{what}: priority must be an integer from 1 to 99, got {value!r}")
    return value


def check_weight(rt: MasterRuntime, pool_name: str, value: Any, what: str) -> float:
    if scheduler_of(rt, pool_name) != "fair_share":
        raise BadRequest(f"{what}: weight applies only under the fair_share scheduler; pool "
                         f"{pool_name!r} uses priority (set a priority instead)")
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


async def aux_running(session: AsyncSession) -> dict[str, int]:
    """Zero-slot (aux) allocations placed or running, per pool."""
    rows = (await session.execute(
        select(Allocation.resource_pool, func.count()).where(
            Allocation.state.in_((A.ASSIGNED, A.RUNNING)), Allocation.slots_needed == 0)
        .group_by(Allocation.resource_pool))).all()
    return {pool: n for pool, n in rows}
