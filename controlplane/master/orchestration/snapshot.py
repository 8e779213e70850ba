"""What the scheduler sees: pending and running allocations, live agents and pool policies,
read from the database and the agent hub as plain values for the pure planner. A pending
allocation carries its experiment's ``environment.image``, a live agent the environments it
offers; an agent that goes away takes its environments with it (its work waits). An OpenPAI job's
tasks carry their CPUs (``cpuNumber``) and fixed ports (``portList`` with ``beginAt``), an agent its
CPUs, those its running OpenPAI tasks booked, its host and the ports live work holds there.

A trial's allocations are read as columns, not ORM rows, and each experiment's once (its config
decoded once a pass, not once per allocation): the pass reads every live allocation at every tick.
The orchestrator loads the rows it acts on (``rows``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware
from controlplane.master.db.batches import in_batches
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
    # An OpenPAI job attempt's pending tasks, one request for the planner: group id -> (job, its
    # task allocations in pai_jobs.task_order).
    pending_groups: dict[str, tuple[PaiJob, list[Allocation]]] = field(default_factory=dict)
    # live allocation id -> its ranks' columns (resources, agent_id, slot_ids): the ports they hold
    live_ranks: dict[str, tuple[list[Any], str | None, list[Any]]] = field(default_factory=dict)

    @property
    def pending_ids(self) -> set[str]:
        """The pending requests' ids (a trial's allocation, an OpenPAI job attempt's group)."""
        return {r.allocation_id for r in self.pending}

    def used_ports(self) -> dict[str, set[int]]:
        """address -> the ports live allocations hold there (a new dict: placements add to it)."""
        return rendezvous.used_ports(gang.ranks_in(*cols) for cols in self.live_ranks.values())


@dataclass(frozen=True)
class _Job:
    """An experiment's columns the planner needs, its config decoded once a pass."""

    id: int
    job_id: str
    priority: int | None
    config: dict[str, Any]
    weight: float
    max_slots: int | None
    queue_position: float
    start_time: datetime | None


def job_priority(exp: Experiment | _Job, policy: PoolPolicy | None) -> int:
    if exp.priority is not None:
        return exp.priority
    configured = (exp.config.get("resources") or {}).get("priority")
    if configured is not None:
        return int(configured)
    return policy.default_priority if policy else DEFAULT_PRIORITY


def _ts(value: Any) -> float:
    value = aware(value)
    return value.timestamp() if value is not None else 0.0


def experiment_image(exp: Experiment | _Job) -> Image:
    """The environment its tasks run in."""
    try:
        return image_of_config(exp.config)
    except ValueError:  # checked at create; a config stored before that check: no agent offers it
        return Image(UNUSABLE, UNUSABLE, UNUSABLE)


def _holds(resources: list[Any] | None, agent_id: str | None, slot_ids: list[Any] | None, slots_needed: int,
           used: dict[str, set[int]],
           zero_slot: dict[str, int]) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], str | None]:
    """A live allocation's slots per agent (added to ``used``) and, for a zero-slot task, its agent
    (counted in ``zero_slot``)."""
    ranks = gang.slots_in(resources, agent_id, slot_ids)
    held = tuple((agent, slots) for agent, slots in ranks if slots)
    for agent, slots in held:
        used.setdefault(agent, set()).update(slots)
    zero_agent = None
    if slots_needed == 0 and ranks:
        zero_agent = ranks[0][0]
        zero_slot[zero_agent] = zero_slot.get(zero_agent, 0) + 1
    return held, zero_agent


async def _jobs(session: AsyncSession, ids: Collection[int]) -> dict[int, _Job]:
    """The experiments named, by id: their columns, each config decoded once."""
    jobs = {}
    for batch in in_batches(ids):
        for row in (await session.execute(select(
                Experiment.id, Experiment.job_id, Experiment.priority, Experiment.config, Experiment.weight,
                Experiment.max_slots, Experiment.queue_position, Experiment.start_time,
        ).where(Experiment.id.in_(batch)))).all():
            jobs[row.id] = _Job(row.id, row.job_id, row.priority, row.config or {}, row.weight, row.max_slots,
                                row.queue_position, row.start_time)
    return jobs


async def rows(session: AsyncSession, ids: Collection[str]) -> Mapping[str, Allocation]:
    """The allocations the pass acts on (placed, preempted), as rows: one query per batch of them."""
    found = {}
    for batch in in_batches(ids):
        for alloc in (await session.scalars(select(Allocation).where(Allocation.id.in_(batch)))).all():
            found[alloc.id] = alloc
    return found


async def take(session: AsyncSession, rt: RuntimeCore) -> SchedulingSnapshot:
    pools = {p.name: p.policy for p in rt.settings.pools}
    allocs = (await session.execute(
        select(Allocation.id, Allocation.state, Allocation.resource_pool, Allocation.slots_needed,
               Allocation.agent_id, Allocation.slot_ids, Allocation.resources, Allocation.assigned_at,
               Allocation.preempt_requested, Trial.experiment_id)
        .join(Trial, Trial.id == Allocation.trial_id)
        .where(Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING)))
        .order_by(Allocation.created_at, Allocation.id))).all()
    jobs = await _jobs(session, {a.experiment_id for a in allocs})
    pending: list[Request] = []
    running: list[Running] = []
    live_ranks: dict[str, tuple[list[Any], str | None, list[Any]]] = {}
    used: dict[str, set[int]] = {}
    zero_slot: dict[str, int] = {}
    images: dict[int, Image] = {}  # experiment id -> its environment (parsed once per pass)
    priorities: dict[tuple[int, str], int] = {}  # (experiment id, pool) -> its priority there
    for alloc in allocs:
        exp = jobs.get(alloc.experiment_id)
        if exp is None:  # deleted since the first read (its allocations go with it)
            continue
        key = (exp.id, alloc.resource_pool)
        if key not in priorities:
            priorities[key] = job_priority(exp, pools.get(alloc.resource_pool))
        priority = priorities[key]
        if alloc.state == A.PENDING:
            if exp.id not in images:
                images[exp.id] = experiment_image(exp)
            pending.append(Request(
                allocation_id=alloc.id, job_id=exp.job_id, pool=alloc.resource_pool, slots_needed=alloc.slots_needed,
                priority=priority, weight=exp.weight, max_slots=exp.max_slots, queue_position=exp.queue_position,
                submitted_at=_ts(exp.start_time), image=images[exp.id]))
            continue
        live_ranks[alloc.id] = (alloc.resources, alloc.agent_id, alloc.slot_ids)
        resources, zero_agent = _holds(alloc.resources, alloc.agent_id, alloc.slot_ids, alloc.slots_needed, used,
                                       zero_slot)
        running.append(Running(
            allocation_id=alloc.id, job_id=exp.job_id, pool=alloc.resource_pool, resources=resources,
            priority=priority, weight=exp.weight, started_at=_ts(alloc.assigned_at),
            preemptible=True, preempting=alloc.preempt_requested, zero_slot_agent=zero_agent,
            queue_position=exp.queue_position, submitted_at=_ts(exp.start_time)))
    cpus: dict[str, int] = {}  # agent -> CPUs its running OpenPAI tasks booked
    groups = await _pai_tasks(session, pools, pending, running, live_ranks, used, zero_slot, cpus)
    # the ports live work holds per address: only a group with fixed ports needs them
    ports = rendezvous.used_ports(gang.ranks_in(*cols) for cols in live_ranks.values()) \
        if any(any(r.task_ports) for r in pending) else {}
    flags = {a.id: a for a in (await session.execute(
        select(Agent.id, Agent.enabled, Agent.draining, Agent.disabled_slots))).all()}
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
    return SchedulingSnapshot(pools, pending, running, agents, groups, live_ranks)


async def _pai_tasks(session: AsyncSession, pools: dict[str, PoolPolicy], pending: list[Request],
                     running: list[Running], live_ranks: dict[str, tuple[list[Any], str | None, list[Any]]],
                     used: dict[str, set[int]],
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
        live_ranks[alloc.id] = (alloc.resources, alloc.agent_id, alloc.slot_ids)
        resources, zero_agent = _holds(alloc.resources, alloc.agent_id, alloc.slot_ids, alloc.slots_needed, used,
                                       zero_slot)
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
