"""The fair-share scheduler for one pool: weighted max-min shares of the pool's slots.

Each active job's share is found by water-filling: capacity is split by weight, jobs that
need less than their split (demand, or `max_slots`) keep only what they need, and the rest
is split again among the others. Pending work of the jobs furthest below their share is
placed first; a job at or above its share waits while others are below theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.model import AgentSnapshot, Placement, Plan, PoolPolicy, Request, Running


def shares(capacity: int, demand: dict[str, int], weight: dict[str, float]) -> dict[str, float]:
    share = {j: 0.0 for j in demand}
    open_jobs = {j for j, d in demand.items() if d > 0}
    left = float(capacity)
    while open_jobs and left > 1e-9:
        total_w = sum(weight[j] for j in open_jobs)
        split = {j: left * weight[j] / total_w for j in open_jobs}
        satisfied = {j for j in open_jobs if demand[j] - share[j] <= split[j]}
        if not satisfied:
            for j in open_jobs:
                share[j] += split[j]
            break
        for j in sorted(satisfied):
            left -= demand[j] - share[j]
            share[j] = float(demand[j])
        open_jobs -= satisfied
    return share


def plan_pool(policy: PoolPolicy, pending: Sequence[Request], running: Sequence[Running],
              agents: Sequence[AgentSnapshot]) -> Plan:
    plan = Plan()
    cap = Capacity(agents, policy.fitting_policy)
    capacity = sum(cap.size.values())
    allocated: dict[str, int] = {}
    demand: dict[str, int] = {}
    weight: dict[str, float] = {}
    cap_of: dict[str, int | None] = {}
    for r in running:
        slots = sum(len(s) for _, s in r.resources)
        allocated[r.job_id] = allocated.get(r.job_id, 0) + slots
        demand[r.job_id] = demand.get(r.job_id, 0) + slots
        weight.setdefault(r.job_id, r.weight)
    slotted = [r for r in pending if r.slots_needed > 0]
    for r in slotted:
        demand[r.job_id] = demand.get(r.job_id, 0) + r.slots_needed
        weight[r.job_id] = r.weight
        cap_of[r.job_id] = r.max_slots
    for job, limit in cap_of.items():
        if limit is not None:
            demand[job] = min(demand[job], limit)
    share = shares(capacity, demand, weight)

    def key(r: Request) -> tuple:
        got = allocated.get(r.job_id, 0)
        return (got / share[r.job_id] if share.get(r.job_id) else float("inf"), r.submitted_at, r.queue_position,
                r.allocation_id)

    for req in sorted(slotted, key=key):
        got = allocated.get(req.job_id, 0)
        limit = cap_of.get(req.job_id)
        if got >= share.get(req.job_id, 0) - 1e-9 or (limit is not None and got + req.slots_needed > limit):
            continue
        found = cap.find(req.slots_needed)
        if found is None:
            continue
        cap.take(found)
        allocated[req.job_id] = got + req.slots_needed
        plan.placements.append(Placement(req.allocation_id, found))
    return plan
