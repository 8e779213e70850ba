"""The job queue: open jobs of every kind in scheduling order, as `det job list` shows them, and the
scheduler rules that changes to it must keep (priority only under the priority scheduler, weight
only under fair share). The changes themselves are ``job_updates``'s.

A job is an experiment (``experiments``) or a row of ``pai_jobs``: an OpenPAI job or one of
Determined's commands, shells and notebooks. Both carry ``job_id``, ``priority`` (None: the pool's
default), ``queue_position`` and a submission time, which the scheduler sorts by
(``orchestration/snapshot.py``); ``JobRow`` is one of them as the queue shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, iso
from controlplane.master.db.models import Allocation, Experiment, PaiJob, Trial, User
from controlplane.master.errors import BadRequest
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.snapshot import job_priority
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.experiment_requests import MAX_WEIGHT, PatchCheckpointStorage
from controlplane.scheduler.model import DEFAULT_PRIORITY, AgentSnapshot, PoolPolicy
from controlplane.state import allocation as A
from controlplane.state import experiment as E
from controlplane.state import pai_job as J

OPEN_STATES = (E.ACTIVE, E.PAUSED, E.STOPPING_COMPLETED, E.STOPPING_CANCELED, E.STOPPING_KILLED,
               E.STOPPING_ERROR)
PAI_OPEN_STATES = (J.WAITING, J.RUNNING)
LIVE = (A.PENDING, A.ASSIGNED, A.RUNNING)

EXPERIMENT = "experiment"
# Determined's v1Job type of each kind; an OpenPAI job is one of Determined's generic tasks.
JOB_TYPES = {EXPERIMENT: "TYPE_EXPERIMENT", "command": "TYPE_COMMAND", "shell": "TYPE_SHELL",
             "notebook": "TYPE_NOTEBOOK", "tensorboard": "TYPE_TENSORBOARD", "pai": "TYPE_GENERIC"}
KIND_WORDS = {EXPERIMENT: "an experiment", "command": "a command", "shell": "a shell", "notebook": "a notebook",
              "tensorboard": "a TensorBoard", "pai": "an OpenPAI job"}

QueueJob = Experiment | PaiJob  # what a job of the queue is stored as


def kind_of(job: QueueJob) -> str:
    return EXPERIMENT if isinstance(job, Experiment) else (job.kind or "pai")


def type_of(kind: str) -> str:
    return JOB_TYPES.get(kind, "TYPE_GENERIC")


def describe(job: QueueJob) -> str:
    """How messages name a job: its id and what it is (``job 1f0c... (experiment 3)``)."""
    if isinstance(job, Experiment):
        return f"job {job.job_id} (experiment {job.id})"
    if kind_of(job) == "pai":
        return f"job {job.job_id} (OpenPAI job {job.name})"
    return f"job {job.job_id} (a {kind_of(job)})"  # a command's id is its job id


def what_it_is(job: QueueJob) -> str:
    """What it is, for refusals that depend on its type: e.g. ``a command (TYPE_COMMAND)``."""
    kind = kind_of(job)
    return f"{KIND_WORDS.get(kind, 'a ' + kind)} ({type_of(kind)})"


def is_open(job: QueueJob) -> bool:
    return job.state in (OPEN_STATES if isinstance(job, Experiment) else PAI_OPEN_STATES)


def submitted_at(job: QueueJob) -> datetime:
    return job.start_time if isinstance(job, Experiment) else job.created_at


def priority_of(job: QueueJob, policy: PoolPolicy | None) -> int:
    """The priority the scheduler gives it (``snapshot.py``): set, configured, or the pool's default."""
    if isinstance(job, Experiment):
        return job_priority(job, policy)
    if job.priority is not None:
        return job.priority
    return policy.default_priority if policy else DEFAULT_PRIORITY


@dataclass(frozen=True)
class JobRow:
    """One open job of the queue: its queue fields, what it is, and the row behind it."""

    kind: str  # "experiment", or the pai_jobs kind: "pai", "command", "shell", "notebook"
    job_id: str
    entity_id: str  # the experiment's id, the command's id (its job id), the OpenPAI job's name
    name: str  # the experiment's name, the command's description, the OpenPAI jobName
    resource_pool: str
    owner_id: int
    username: str
    priority: int  # as the scheduler sees it
    weight: float  # only experiments have one; 1.0 (the scheduler's default) for the others
    queue_position: float
    submitted: datetime
    requested: int
    allocated: int
    scheduled: bool
    job: QueueJob
    waiting: str = ""  # why its pending work waits, as the scheduler's last pass saw it ("": nothing waits)

    @property
    def type(self) -> str:
        return type_of(self.kind)

    @property
    def experiment(self) -> Experiment | None:
        return self.job if isinstance(self.job, Experiment) else None


def waiting_reason(rt: MasterRuntime, job_id: str) -> str:
    """Why the job's pending work waits (the orchestrator's last pass, in memory); "" when nothing does."""
    orchestrator = getattr(rt, "orchestrator", None)
    return orchestrator.waiting.of_job(job_id) if orchestrator is not None else ""


def _row(rt: MasterRuntime, job: QueueJob, username: str, usage: tuple[int, int, bool]) -> JobRow:
    pool = rt.settings.pool(job.resource_pool)
    kind = kind_of(job)
    if isinstance(job, Experiment):
        entity_id, name, weight = str(job.id), job.name, job.weight
    else:
        entity_id = job.name if kind == "pai" else job.job_id
        name = job.name if kind == "pai" else (job.description or job.name)
        weight = 1.0
    return JobRow(kind=kind, job_id=job.job_id, entity_id=entity_id, name=name, resource_pool=job.resource_pool,
                  owner_id=job.owner_id, username=username, priority=priority_of(job, pool.policy if pool else None),
                  weight=weight, queue_position=job.queue_position, submitted=submitted_at(job), requested=usage[0],
                  allocated=usage[1], scheduled=usage[2], job=job, waiting=waiting_reason(rt, job.job_id))


def sort_key(row: JobRow, rt: MasterRuntime) -> tuple[Any, ...]:
    """The scheduler's order: priority, queue position, submission time (under fair share, submission
    time alone); ties by table and row id, so the order is stable."""
    pool = rt.settings.pool(row.resource_pool)
    submitted = aware(row.submitted).timestamp()
    tie = (0 if row.experiment is not None else 1, row.job.id)
    if pool is not None and pool.policy.scheduler == "fair_share":
        return (0, 0.0, submitted, tie)
    return (row.priority, row.queue_position, submitted, tie)


def _add(usage: dict[Any, tuple[int, int, bool]], key: Any, alloc: Allocation) -> None:
    requested, allocated, scheduled = usage.get(key, (0, 0, False))
    live = alloc.state != A.PENDING
    usage[key] = (requested + alloc.slots_needed,
                  allocated + (sum(len(r.slot_ids) for r in gang.resources_of(alloc)) if live else 0),
                  scheduled or live)


async def job_rows(session: AsyncSession, rt: MasterRuntime, pool: str | None = None) -> list[JobRow]:
    """Every open job (of the pool, if given) in scheduling order, with its slots requested
    (pending and live allocations), allocated (live ones) and whether any is placed."""
    eq = select(Experiment, User.username).join(User, User.id == Experiment.owner_id).where(
        Experiment.state.in_(OPEN_STATES))
    pq = select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id).where(
        PaiJob.state.in_(PAI_OPEN_STATES))
    if pool:
        eq = eq.where(Experiment.resource_pool == pool)
        pq = pq.where(PaiJob.resource_pool == pool)
    exps = (await session.execute(eq)).all()
    pais = (await session.execute(pq)).all()
    exp_usage: dict[int, tuple[int, int, bool]] = {}
    for exp_id, alloc in (await session.execute(
            select(Trial.experiment_id, Allocation).join(Trial, Trial.id == Allocation.trial_id)
            .where(Allocation.state.in_(LIVE)))).all():
        _add(exp_usage, exp_id, alloc)
    pai_usage: dict[int, tuple[int, int, bool]] = {}
    if pais:
        for alloc in (await session.scalars(select(Allocation).where(
                Allocation.pai_job_id.is_not(None), Allocation.state.in_(LIVE)))).all():
            _add(pai_usage, alloc.pai_job_id, alloc)
    none = (0, 0, False)
    rows = ([_row(rt, e, u, exp_usage.get(e.id, none)) for e, u in exps]
            + [_row(rt, j, u, pai_usage.get(j.id, none)) for j, u in pais])
    return sorted(rows, key=lambda r: sort_key(r, rt))


def in_queue(row: JobRow) -> bool:
    """What the queue shows (as Determined's, which lists jobs that ask for resources): a paused
    experiment holding nothing waits for nothing, so it is left out rather than shown 0/0 Queued."""
    exp = row.experiment
    return not (exp is not None and exp.state == E.PAUSED and row.requested == 0)


def job_json(row: JobRow, rt: MasterRuntime, jobs_ahead: int, progress: float = 0.0,
             workspace_id: int = 1) -> dict[str, Any]:
    """Determined's ``v1Job``. Only experiments are preempted by the scheduler (``snapshot.py``).
    ``waitingReason`` is ours, present only while some of its work waits (Determined's client ignores it)."""
    experiment = row.experiment is not None
    out = {
        "jobId": row.job_id, "type": row.type, "entityId": row.entity_id, "name": row.name,
        "submissionTime": iso(row.submitted), "username": row.username, "userId": row.owner_id,
        "resourcePool": row.resource_pool, "isPreemptible": experiment,
        "priority": row.priority, "weight": row.weight,
        "requestedSlots": row.requested, "allocatedSlots": row.allocated, "progress": progress if experiment else 0.0,
        "workspaceId": workspace_id if experiment else 1,
        "summary": {"state": "STATE_SCHEDULED" if row.scheduled else "STATE_QUEUED", "jobsAhead": jobs_ahead},
    }
    if row.waiting:
        out["waitingReason"] = row.waiting
    return out


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


def with_gc_policy(config: dict[str, Any], change: PatchCheckpointStorage) -> dict[str, Any]:
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


def pool_agents(rt: MasterRuntime, pool_name: str, gpu_type: str | None = None) -> tuple[list[AgentSnapshot], bool]:
    """The pool's agents as the planner sees them, all idle: its connected agents (with a GPU model
    matching ``gpu_type``, if given), and for an autoscaled pool the instances it may launch (their
    GPU models and CPUs unknown). With it, whether the pool grows (has a ``provider``)."""
    from controlplane.scheduler.environment import Image

    wanted = Image(gpu_type=gpu_type)
    agents = [AgentSnapshot(agent_id=c.agent_id, pool=c.pool, slot_ids=tuple(s.id for s in c.slots),
                            used_slot_ids=frozenset(), cpus=c.cpus, host=c.address,
                            gpu_models=frozenset(s.brand.lower() for s in c.slots if s.brand))
              for c in rt.hub.connections.values() if c.pool == pool_name]
    agents = [a for a in agents if wanted.fits_gpus(a.gpu_models)]
    pool = rt.settings.pool(pool_name)
    if pool is None or not pool.provider:
        return agents, False
    # An autoscaled pool: judge by what it can grow to, not by what runs now.
    from controlplane.master.autoscaling.service import scaling_of

    scaling = scaling_of(pool)
    agents += [AgentSnapshot(agent_id=f"(new instance {i + 1})", pool=pool_name,
                             slot_ids=tuple(range(scaling.slots_per_instance)), used_slot_ids=frozenset())
               for i in range(scaling.max_instances)]
    return agents, True


def shape_problem(rt: MasterRuntime, pool_name: str, slots_needed: int) -> str | None:
    """Why a gang of this size can never run in the pool's current agents (None: it can, or
    the pool has no agents yet to judge by)."""
    from controlplane.scheduler.gang import shape_error

    agents, _ = pool_agents(rt, pool_name)
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
