"""One scheduling pass over every pool: pending requests, running work and agents in; the
placements and preemptions to make out. Pure: the same inputs always give the same plan.

Each pool is planned on its own with its own policy (priority or fair share); zero-slot
tasks are planned apart from slotted work (but a task group, even of zero-slot tasks only, is
placed whole by its pool's scheduler). A request for an unknown pool, or for a pool
with no agents, is simply left pending. `now` is taken so that callers pass the clock in
(no scheduler reads it); today no rule depends on it.

Every pending request that gets no placement gets a reason in ``Plan.waiting`` (waiting.py), a
request of an unknown pool or of a pool without agents too. A pool's CPUs and fixed ports
(booking.py) are booked by its slotted pass and then its zero-slot pass, in that order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.scheduler import fair_share, priority, waiting, zero_slot
from controlplane.scheduler.booking import Booking
from controlplane.scheduler.model import AgentSnapshot, Plan, PoolPolicy, Request, Running


def _fifo(pending: Sequence[Request]) -> list[Request]:
    return sorted(pending, key=lambda r: (r.submitted_at, r.queue_position, r.allocation_id))


def plan(pools: Mapping[str, PoolPolicy], pending: Sequence[Request], running: Sequence[Running],
         agents: Sequence[AgentSnapshot], now: float) -> Plan:
    by_pool_pending: dict[str, list[Request]] = {}
    for r in pending:
        by_pool_pending.setdefault(r.pool, []).append(r)
    by_pool_running: dict[str, list[Running]] = {}
    for run in running:
        by_pool_running.setdefault(run.pool, []).append(run)
    by_pool_agents: dict[str, list[AgentSnapshot]] = {}
    for a in agents:
        by_pool_agents.setdefault(a.pool, []).append(a)
    result = Plan()
    for pool in sorted(by_pool_pending):
        policy = pools.get(pool)
        pool_agents = by_pool_agents.get(pool, [])
        if policy is None or not pool_agents:  # unknown pool or no agents: the requests wait
            result.waiting.update(waiting.explain(pool, policy, by_pool_pending[pool], [], pool_agents, []))
            continue
        fair = policy.scheduler == "fair_share"
        scheduler = fair_share if fair else priority
        booking = Booking(a for a in pool_agents if a.schedulable)  # CPUs and fixed ports, both passes
        part = scheduler.plan_pool(policy, by_pool_pending[pool], by_pool_running.get(pool, []), pool_agents,
                                   booking)
        zero = [r for r in by_pool_pending[pool] if r.slots_needed <= 0]  # groups of zero-slot tasks too
        if zero:
            ordered = _fifo(zero) if fair else priority.order(zero)
            part.placements.extend(zero_slot.place(policy, ordered, pool_agents, booking))
        result.placements.extend(part.placements)
        result.preemptions.extend(part.preemptions)
        result.waiting.update(waiting.explain(pool, policy, by_pool_pending[pool], by_pool_running.get(pool, []),
                                              pool_agents, part.placements, part.waiting))
    return result
