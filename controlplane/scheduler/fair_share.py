"""The fair-share scheduler for one pool: weighted max-min shares of the pool's slots.

Each active job's share is found by water-filling: capacity is split by weight, jobs that
need less than their split (demand, or `max_slots`) keep only what they need, and the rest
is split again among the others. Shares are then made whole slots by largest remainder, so
4 slots split 2/2 for equal weights and 3/1 for weights 3:1 exactly, and no slot is lost.

Placement: jobs furthest below their share go first (then older jobs); a job places a
pending gang only while it stays within its share, so a job never gets ahead of the others.
A job whose smallest gang can never fit within its share would hold its share empty forever
(Determined's deadlock); such jobs are set aside for this pass and their share is split
among the rest. With preemption, a job below its share whose gang does not fit takes room
from the newest work of jobs above their share (a job is asked only while it is still above
its share; a gang may leave it below), and waits for those slots as the priority scheduler
does. Determined's fair share always preempts; here `PoolPolicy.preemption` decides.

A task group (``Request.tasks``, an OpenPAI job) counts its slots' sum like any gang and is placed
whole (Capacity.find_group) within its job's share, or waits; it never preempts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from controlplane.scheduler.booking import Booking
from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.model import AgentSnapshot, Placement, Plan, PoolPolicy, Preemption, Request, Running
from controlplane.scheduler.preempt import choose_victims, preempting, reserve, soon_free


def shares(capacity: int, demand: dict[str, int], weight: dict[str, float]) -> dict[str, float]:
    """Weighted max-min (water-filling) split of capacity; nobody gets more than its demand."""
    share = {j: 0.0 for j in demand}
    open_jobs = {j for j, d in demand.items() if d > 0}
    left = float(capacity)
    while open_jobs and left > 1e-9:
        total_w = sum(max(weight[j], 1e-9) for j in open_jobs)
        split = {j: left * max(weight[j], 1e-9) / total_w for j in open_jobs}
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


def whole_shares(capacity: int, demand: dict[str, int], weight: dict[str, float],
                 seniority: dict[str, tuple[float, str]]) -> dict[str, int]:
    """Shares in whole slots: floors first, then the slots left over one each by largest
    fraction (ties: older job first), never above a job's demand."""
    exact = shares(capacity, demand, weight)
    whole = {j: min(demand[j], math.floor(s + 1e-9)) for j, s in exact.items()}
    left = min(capacity, sum(demand.values())) - sum(whole.values())
    for j in sorted(exact, key=lambda j: (-(exact[j] - whole[j]), seniority[j])):
        if left <= 0:
            break
        if whole[j] < demand[j]:
            whole[j] += 1
            left -= 1
    return whole


def plan_pool(policy: PoolPolicy, pending: Sequence[Request], running: Sequence[Running],
              agents: Sequence[AgentSnapshot], booking: Booking | None = None) -> Plan:
    plan = Plan()
    pool = Capacity(agents, policy.fitting_policy, {q.image for q in pending}, booking)
    capacity = sum(pool.size.values())
    got: dict[str, int] = {}  # slots each job holds, not counting work already preempting
    weight: dict[str, float] = {}
    seniority: dict[str, tuple[float, str]] = {}
    for r in running:
        if r.resources and not r.preempting:
            got[r.job_id] = got.get(r.job_id, 0) + sum(len(s) for _, s in r.resources)
            weight.setdefault(r.job_id, r.weight)
            seniority[r.job_id] = min(seniority.get(r.job_id, (r.started_at, r.job_id)), (r.started_at, r.job_id))
    queue: dict[str, list[Request]] = {}  # each job's pending gangs that could ever fit here
    limit: dict[str, int] = {}
    for q in sorted(pending, key=lambda q: (q.queue_position, q.submitted_at, q.allocation_id)):
        if q.tasks and q.slots_needed > 0:  # a task group is placed here, whole (zero-slot ones apart)
            if not pool.view(q.image).could_ever_fit_request(q):
                continue  # an impossible group (or environment) waits
        elif q.slots_needed <= 0 or not pool.view(q.image).could_ever_fit(q.slots_needed):
            continue  # zero-slot work is scheduled apart; impossible shapes (or environments) wait
        queue.setdefault(q.job_id, []).append(q)
        weight[q.job_id] = q.weight
        seniority[q.job_id] = min(seniority.get(q.job_id, (q.submitted_at, q.job_id)), (q.submitted_at, q.job_id))
        if q.max_slots is not None:
            limit[q.job_id] = min(limit.get(q.job_id, q.max_slots), q.max_slots)

    def demand_of(job: str) -> int:
        d = got.get(job, 0) + sum(r.slots_needed for r in queue.get(job, ()))
        return min(d, limit[job]) if job in limit else d

    demand = {j: demand_of(j) for j in weight}
    share = whole_shares(capacity, demand, weight, seniority)
    stuck = {j for j, q in queue.items() if got.get(j, 0) + min(r.slots_needed for r in q) > share[j]}
    if stuck:  # their share can never hold their smallest gang: give it to the others this pass
        for j in stuck:
            demand[j] = got.get(j, 0)
        share = whole_shares(capacity, demand, weight, seniority)

    victims_in_order = sorted((r for r in running if r.resources and r.preemptible and not r.preempting),
                              key=lambda r: (-r.started_at, r.allocation_id))
    soon = soon_free(running)
    claimed: set[str] = set()
    jobs = sorted((j for j in queue if j not in stuck),
                  key=lambda j: (-(share[j] - got.get(j, 0)), seniority[j]))
    for job in jobs:
        for req in queue[job]:
            n = req.slots_needed
            cap = pool.view(req.image)  # the agents offering its environment
            if got.get(job, 0) + n > share[job]:
                continue  # beyond its share (a smaller gang of the job may still fit)
            found = cap.find_request(req) if req.tasks else cap.find(n)
            if found is not None:
                cap.take_request(req, found)
                got[job] = got.get(job, 0) + n
                plan.placements.append(Placement(req.allocation_id, found))
                continue
            if not policy.preemption or req.tasks:  # a task group never preempts: it waits
                continue

            def over_share(v: Running, chosen: list[Running], job: str = job) -> bool:
                if v.allocation_id in claimed or v.job_id == job:
                    return False
                taken = sum(len(s) for c in chosen if c.job_id == v.job_id for _, s in c.resources)
                return got.get(v.job_id, 0) - taken > share.get(v.job_id, 0)

            found_victims = choose_victims(n, cap, victims_in_order, soon, over_share)
            if found_victims is None:
                continue
            victims, where = found_victims
            for v in victims:
                claimed.add(v.allocation_id)
                got[v.job_id] -= sum(len(s) for _, s in v.resources)
                plan.preemptions.append(Preemption(
                    v.allocation_id, f"preempted for fair share: job {v.job_id} is over its share of "
                                     f"{share.get(v.job_id, 0)} slots and job {job} is below its share "
                                     f"of {share[job]}"))
            reserve(cap, soon, victims, where, n)  # it waits for those slots
            plan.waiting[req.allocation_id] = preempting(n, victims)
            got[job] = got.get(job, 0) + n
    return plan
