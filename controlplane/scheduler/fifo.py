"""FIFO scheduling over one pool with exact slot accounting: a pure planner.

plan(pending, agents) -> placements. Requests are taken in queue order; each goes to the
agent of its pool whose free slots fit it most tightly (fewest free slots left over), so big
gaps stay open for big requests. The queue is FIFO: the first request that fits on some agent
of its pool when idle, but not now, blocks the requests behind it in that pool. A request that
fits on no agent of its pool even when idle (too many slots) does not block: it waits for
capacity (the autoscaler's business) and the queue moves on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PendingRequest:
    allocation_id: str
    pool: str
    slots_needed: int


@dataclass(frozen=True)
class AgentSnapshot:
    agent_id: str
    pool: str
    slot_ids: tuple[int, ...]  # every slot of the agent
    used_slot_ids: frozenset[int]  # slots held by live allocations
    schedulable: bool = True  # connected, enabled and not draining


@dataclass(frozen=True)
class Placement:
    allocation_id: str
    agent_id: str
    slot_ids: tuple[int, ...]


def plan(pending: Sequence[PendingRequest], agents: Sequence[AgentSnapshot]) -> list[Placement]:
    free: dict[str, list[int]] = {
        a.agent_id: [s for s in a.slot_ids if s not in a.used_slot_ids] for a in agents if a.schedulable
    }
    by_pool: dict[str, list[AgentSnapshot]] = {}
    for a in agents:
        if a.schedulable:
            by_pool.setdefault(a.pool, []).append(a)
    blocked: set[str] = set()
    placements: list[Placement] = []
    for req in pending:
        if req.pool in blocked:
            continue
        candidates = by_pool.get(req.pool, [])
        fitting = [a for a in candidates if len(free[a.agent_id]) >= req.slots_needed]
        if not fitting:
            if any(len(a.slot_ids) >= req.slots_needed for a in candidates):
                blocked.add(req.pool)  # it will fit once work ends: hold the line behind it
            continue
        best = min(fitting, key=lambda a: (len(free[a.agent_id]) - req.slots_needed, a.agent_id))
        taken = tuple(free[best.agent_id][: req.slots_needed])
        free[best.agent_id] = free[best.agent_id][req.slots_needed:]
        placements.append(Placement(req.allocation_id, best.agent_id, taken))
    return placements
