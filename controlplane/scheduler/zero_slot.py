"""Zero-slot (CPU-only) tasks: scheduled apart from slotted work.

They need no slot, so they never block, are never blocked by, and never preempt slotted
work (a CPU notebook can start while a GPU job waits). Each goes to the schedulable agent
of its pool running the fewest zero-slot tasks (ties by agent id), below the pool's
`max_zero_slot_per_agent` (Determined's max_aux_containers_per_agent). A heap keeps each
choice O(log agents).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from controlplane.scheduler.model import AgentSnapshot, Placement, PoolPolicy, Request


def place(policy: PoolPolicy, ordered: Sequence[Request], agents: Sequence[AgentSnapshot]) -> list[Placement]:
    """Placements for the zero-slot requests of `ordered` (already in scheduling order)."""
    load = [(a.zero_slot_tasks, a.agent_id) for a in agents
            if a.schedulable and a.zero_slot_tasks < policy.max_zero_slot_per_agent]
    heapq.heapify(load)
    out: list[Placement] = []
    for req in ordered:
        if req.slots_needed > 0:
            continue
        if not load:
            break  # every agent is at its cap: the rest wait
        tasks, agent_id = heapq.heappop(load)
        out.append(Placement(req.allocation_id, ((agent_id, ()),)))
        if tasks + 1 < policy.max_zero_slot_per_agent:
            heapq.heappush(load, (tasks + 1, agent_id))
    return out
