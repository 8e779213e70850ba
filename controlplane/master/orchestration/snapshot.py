"""What the scheduler sees: pending and running allocations, live agents and pool policies,
read from the database and the agent hub as plain values for the pure planner. A pending
allocation carries its experiment's ``environment.image``, a live agent the environments it
offers; an agent that goes away takes its environments with it (its work waits). An OpenPAI job's
tasks carry their CPUs (``cpuNumber``) and fixed ports (``portList`` with ``beginAt``), an agent its
CPUs, those its running OpenPAI tasks booked, its host and the ports live work holds there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware
from controlplane.master.db.models import Agent, Allocation, Experiment, PaiJob, Trial
from controlplane.master.orchestration import gang, pai_jobs, rendezvous
from controlplane.master.runtime_core import RuntimeCore
from controlplane.scheduler.environment import Image, image_of_config, slot_type_of
from controlplane.scheduler.model import DEFAULT_PRIORITY, AgentSnapshot, PoolPolicy, Request, Running
from controlplane.state import allocation as A

UNUSABLE = "(invalid environment.image)"


@dataclass
class SchedulingSnapshot:
    pools: dict[str, PoolPolicy]
    pending: list[Request]
    running: list[Running]
    agents: list[AgentSnapshot]
    pending_rows: dict[str, Allocation]
    running_rows: dict[str, Allocation]
    # An OpenPAI job attempt's pending tasks, one request for the planner: group id -> (job, its
    # task allocations in pai_jobs.task_order).
    pending_groups: dict[str, tuple[PaiJob, list[Allocation]]] = field(default_factory=dict)


def job_priority(exp: Experiment, policy: PoolPolicy | None) -> int:
    if exp.priority is not None:
        return exp.priority
    configured = (exp.config.get("resources") or {}).get("priority")
    if configured is not None:
        return int(configured)
    return policy.default_priority if policy else DEFAULT_PRIORITY


def _ts(value: Any) -> float:
    value = aware(value)
    return value.timestamp() if value is not None else 0.0


def experiment_image(exp: Experiment) -> Image:
    """The environment its tasks run in."""
    try:
        return image_of_config(exp.config)
    except ValueError:  # checked at create; a config stored before that check: no agent offers it
        return Image(UNUSABLE, UNUSABLE, UNUSABLE)


def _holds(alloc: Allocation, used: dict[str, set[int]],
           zero_slot: dict[str, int]) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], str | None]:
    """A live allocation's slots per agent (added to ``used``) and, for a zero-slot task, its agent
    (counted in ``zero_slot``)."""
    resources = tuple((r.agent_id, tuple(r.slot_ids)) for r in gang.resources_of(alloc) if r.slot_ids)
    for agent_id, slots in resources:
        used.setdefault(agent_id, set()).update(slots)
    zero_agent = None
    if alloc.slots_needed == 0 and gang.agents_of(alloc):
        zero_agent = gang.agents_of(alloc)[0]
        zero_slot[zero_agent] = zero_slot.get(zero_agent, 0) + 1
    return resources, zero_agent


async def take(session: AsyncSession, rt: RuntimeCore) -> SchedulingSnapshot:
    pools = {p.name: p.policy for p in rt.settings.pools}
    rows = (await session.execute(
        select(Allocation, Experiment).join(Trial, Trial.id == Allocation.trial_id)
        .join(Experiment, Experiment.id == Trial.experiment_id)
        .where(Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING)))
        .order_by(Allocation.created_at, Allocation.id))).all()
    pending: list[Request] = []
    running: list[Running] = []
    pending_rows: dict[str, Allocation] = {}
    running_rows: dict[str, Allocation] = {}
    used: dict[str, set[int]] = {}
    zero_slot: dict[str, int] = {}
    images: dict[int, Image] = {}  # experiment id -> its environment (parsed once per pass)
    for alloc, exp in rows:
        priority = job_priority(exp, pools.get(alloc.resource_pool))
        if alloc.state == A.PENDING:
            pending_rows[alloc.id] = alloc
            if exp.id not in images:
                images[exp.id] = experiment_image(exp)
            pending.append(Request(
                allocation_id=alloc.id, job_id=exp.job_id, pool=alloc.resource_pool, slots_needed=alloc.slots_needed,
                priority=priority, weight=exp.weight, max_slots=exp.max_slots, queue_position=exp.queue_position,
                submitted_at=_ts(exp.start_time), image=images[exp.id]))
            continue
        running_rows[alloc.id] = alloc
        resources, zero_agent = _holds(alloc, used, zero_slot)
        running.append(Running(
            allocation_id=alloc.id, job_id=exp.job_id, pool=alloc.resource_pool, resources=resources,
            priority=priority, weight=exp.weight, started_at=_ts(alloc.assigned_at),
            preemptible=True, preempting=alloc.preempt_requested, zero_slot_agent=zero_agent,
            queue_position=exp.queue_position, submitted_at=_ts(exp.start_time)))
    cpus: dict[str, int] = {}  # agent -> CPUs its running OpenPAI tasks booked
    groups = await _pai_tasks(session, pools, pending, running, running_rows, used, zero_slot, cpus)
    # the ports live work holds per address: only a group with fixed ports needs them
    ports = rendezvous.used_ports(running_rows.values()) if any(any(r.task_ports) for r in pending) else {}
    flags = {a.id: a for a in (await session.scalars(select(Agent))).all()}
    disabled = {a.id: a.disabled_slots or {} for a in flags.values()}
    agents = [
        AgentSnapshot(
            agent_id=c.agent_id, pool=c.pool,  # a disabled slot (det slot disable) takes no new work
            slot_ids=tuple(s.id for s in c.slots if str(s.id) not in disabled.get(c.agent_id, {})),
            used_slot_ids=frozenset(used.get(c.agent_id, ())),
            schedulable=c.agent_id not in flags or (flags[c.agent_id].enabled and not flags[c.agent_id].draining),
            zero_slot_tasks=zero_slot.get(c.agent_id, 0),
            environments=frozenset(c.environments), slot_type=slot_type_of(s.type for s in c.slots),
            gpu_models=frozenset(s.brand.lower() for s in c.slots if s.brand),
            cpus=c.cpus, used_cpus=cpus.get(c.agent_id, 0), host=c.address,
            used_ports=frozenset(ports.get(c.address, ())),
        )
        for c in rt.hub.connections.values()
    ]
    return SchedulingSnapshot(pools, pending, running, agents, pending_rows, running_rows, groups)


async def _pai_tasks(session: AsyncSession, pools: dict[str, PoolPolicy], pending: list[Request],
                     running: list[Running], running_rows: dict[str, Allocation], used: dict[str, set[int]],
                     zero_slot: dict[str, int], cpus: dict[str, int]) -> dict[str, tuple[PaiJob, list[Allocation]]]:
    """OpenPAI tasks: a job attempt's pending tasks become one task-group request (placed whole or
    not at all); its running tasks hold their slots (and CPUs, counted in ``cpus``) and are never
    preempted (a PAI task has no checkpoint to resume from)."""
    rows = (await session.execute(
        select(Allocation, PaiJob).join(PaiJob, PaiJob.id == Allocation.pai_job_id)
        .where(Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING)))
        .order_by(Allocation.created_at, Allocation.id))).all()
    groups: dict[str, tuple[PaiJob, list[Allocation]]] = {}
    for alloc, job in rows:
        priority = _job_priority(job, pools.get(alloc.resource_pool))
        if alloc.state == A.PENDING:
            groups.setdefault(pai_jobs.group_id(job), (job, []))[1].append(alloc)
            continue
        running_rows[alloc.id] = alloc
        resources, zero_agent = _holds(alloc, used, zero_slot)
        booked = pai_jobs.task_cpus(job, alloc.task_role or "")
        for agent_id in gang.agents_of(alloc)[:1] if booked else ():
            cpus[agent_id] = cpus.get(agent_id, 0) + booked
        running.append(Running(
            allocation_id=alloc.id, job_id=job.job_id, pool=alloc.resource_pool, resources=resources,
            priority=priority, started_at=_ts(alloc.assigned_at), preemptible=False,
            preempting=alloc.preempt_requested, zero_slot_agent=zero_agent, queue_position=job.queue_position,
            submitted_at=_ts(job.created_at)))
    for gid, (job, tasks) in list(groups.items()):
        listed = pai_jobs.task_order(pai_jobs.parsed(job))
        order = {(role, index): n for n, (role, index, _) in enumerate(listed)}
        tasks.sort(key=lambda a: order.get((a.task_role or "", a.task_index or 0), len(order)))
        if len(tasks) != len(order):  # part of the attempt already ended (stopped): nothing to place
            del groups[gid]
            continue
        needs = [pai_jobs.task_needs(job, role) for role, _, _ in listed]
        pending.append(Request(
            allocation_id=gid, job_id=job.job_id, pool=job.resource_pool,
            slots_needed=sum(a.slots_needed for a in tasks), tasks=tuple(a.slots_needed for a in tasks),
            task_cpus=tuple(c for c, _ in needs) if any(c for c, _ in needs) else (),
            task_ports=tuple(p for _, p in needs) if any(p for _, p in needs) else (),
            priority=_job_priority(job, pools.get(job.resource_pool)),
            queue_position=job.queue_position, submitted_at=_ts(job.created_at), preemptible=False,
            image=pai_jobs.image_of(job)))
    return groups


def _job_priority(job: PaiJob, policy: PoolPolicy | None) -> int:
    """A job's own priority, else its pool's default."""
    if job.priority is not None:
        return job.priority
    return policy.default_priority if policy else DEFAULT_PRIORITY
