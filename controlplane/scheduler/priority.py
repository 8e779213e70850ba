"""The priority scheduler for one pool: lower priority number first, then queue position,
then submission time. With preemption, a job that cannot fit asks the lowest-priority,
newest work to make room; without it, lower priorities backfill only capacity the head of
the queue could never use, so they never delay it.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.model import AgentSnapshot, Placement, Plan, PoolPolicy, Preemption, Request, Running


def order(pending: Sequence[Request]) -> list[Request]:
    return sorted(pending, key=lambda r: (r.priority, r.queue_position, r.submitted_at, r.allocation_id))


def _victims(req: Request, cap: Capacity, running: Sequence[Running], claimed: set[str]) -> list[Running] | None:
    """The fewest lower-priority allocations (lowest priority, newest first) whose slots let
    req fit; ones already preempting count first and are not asked again. None: impossible."""
    candidates = [r for r in running if r.preemptible and r.priority > req.priority and r.resources
                  and r.allocation_id not in claimed]
    candidates.sort(key=lambda r: (not r.preempting, -r.priority, -r.started_at, r.allocation_id))
    n = req.slots_needed
    freed: dict[str, int] = {}  # agent -> slots the chosen victims free there
    chosen: list[Running] = []
    for victim in candidates:
        chosen.append(victim)
        for agent_id, slots in victim.resources:
            if agent_id in cap.free:
                freed[agent_id] = freed.get(agent_id, 0) + len(slots)
        if _fits_after(cap, freed, n):
            return chosen
    return None


def _fits_after(cap: Capacity, freed: dict[str, int], n: int) -> bool:
    """Would a gang of n fit once `freed` slots come back (only those agents changed)?"""
    idle_gain: dict[int, int] = {}
    for agent_id, extra in freed.items():
        free = len(cap.free[agent_id]) + extra
        if free >= n:
            return True
        size = cap.size[agent_id]
        if free == size and len(cap.free[agent_id]) < size:
            idle_gain[size] = idle_gain.get(size, 0) + 1
    for size, gain in idle_gain.items():
        if n % size == 0 and len(cap.idle_by_size.get(size, {})) + gain >= n // size:
            return True
    return False


def _known_hopeless(hopeless: dict[int, int], req: Request) -> bool:
    return any(size <= req.slots_needed and prio <= req.priority for size, prio in hopeless.items())


def plan_pool(policy: PoolPolicy, pending: Sequence[Request], running: Sequence[Running],
              agents: Sequence[AgentSnapshot]) -> Plan:
    plan = Plan()
    cap = Capacity(agents, policy.fitting_policy)
    job_slots: dict[str, int] = {}
    for r in running:
        job_slots[r.job_id] = job_slots.get(r.job_id, 0) + sum(len(s) for _, s in r.resources)
    claimed: set[str] = set()  # victims already counted for an earlier request this pass
    head_agents: set[str] | None = None  # capacity the blocked head of the queue could use
    hopeless: dict[int, int] = {}  # gang size -> best priority for which no victims sufficed
    allowed: set[str] | None = None
    for req in order(pending):
        n = req.slots_needed
        if n <= 0:
            continue  # zero-slot work is scheduled separately
        if req.max_slots is not None and job_slots.get(req.job_id, 0) + n > req.max_slots:
            continue  # the job is at its cap: it waits without blocking others
        if not cap.could_ever_fit(n):
            continue  # not on these agents, ever: leave it to the autoscaler, do not block
        found = cap.find(n, allowed)
        if found is not None:
            cap.take(found)
            job_slots[req.job_id] = job_slots.get(req.job_id, 0) + n
            plan.placements.append(Placement(req.allocation_id, found))
            continue
        if head_agents is not None:
            continue
        if policy.preemption and req.preemptible and not _known_hopeless(hopeless, req):
            victims = _victims(req, cap, running, claimed)
            if victims is None:
                # A later request as big or bigger, at this priority or lower, cannot do better.
                hopeless[n] = min(hopeless.get(n, 100), req.priority)
            else:
                for v in victims:
                    claimed.add(v.allocation_id)
                    if not v.preempting:
                        plan.preemptions.append(Preemption(
                            v.allocation_id, f"preempted by job {req.job_id} (priority {req.priority} "
                                             f"over {v.priority})"))
                continue  # it waits for those slots; the rest of the queue goes on
        head_agents = cap.agents_usable_by(n)
        allowed = set(cap.free) - head_agents  # backfill only where the head could never run
        if not allowed:
            break
    return plan
