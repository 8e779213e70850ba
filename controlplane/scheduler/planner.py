"""One scheduling pass over every pool: pending requests, running work and agents in; the
placements and preemptions to make out. Pure: the same inputs always give the same plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.scheduler import fair_share, priority
from controlplane.scheduler.model import AgentSnapshot, Placement, Plan, PoolPolicy, Request, Running


def _zero_slot(policy: PoolPolicy, pending: Sequence[Request], agents: Sequence[AgentSnapshot]) -> list[Placement]:
    """CPU-only tasks: the least loaded schedulable agent under the per-agent cap."""
    load = {a.agent_id: a.zero_slot_tasks for a in sorted(agents, key=lambda a: a.agent_id) if a.schedulable}
    out = []
    for req in priority.order([r for r in pending if r.slots_needed <= 0]):
        candidates = [a for a, n in load.items() if n < policy.max_zero_slot_per_agent]
        if not candidates:
            break
        agent = min(candidates, key=lambda a: load[a])
        load[agent] += 1
        out.append(Placement(req.allocation_id, ((agent, ()),)))
    return out


def plan(pools: Mapping[str, PoolPolicy], pending: Sequence[Request], running: Sequence[Running],
         agents: Sequence[AgentSnapshot], now: float) -> Plan:
    by_pool_pending: dict[str, list[Request]] = {}
    for r in pending:
        by_pool_pending.setdefault(r.pool, []).append(r)
    by_pool_running: dict[str, list[Running]] = {}
    for r in running:
        by_pool_running.setdefault(r.pool, []).append(r)
    by_pool_agents: dict[str, list[AgentSnapshot]] = {}
    for a in agents:
        by_pool_agents.setdefault(a.pool, []).append(a)
    result = Plan()
    for pool in sorted(by_pool_pending):
        policy = pools.get(pool)
        pool_agents = by_pool_agents.get(pool, [])
        if policy is None or not pool_agents:
            continue  # unknown pool or no agents: the requests wait
        scheduler = fair_share if policy.scheduler == "fair_share" else priority
        part = scheduler.plan_pool(policy, by_pool_pending[pool], by_pool_running.get(pool, []), pool_agents)
        result.placements.extend(part.placements)
        result.preemptions.extend(part.preemptions)
        result.placements.extend(_zero_slot(policy, by_pool_pending[pool], pool_agents))
    return result
