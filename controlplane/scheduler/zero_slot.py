"""Zero-slot (CPU-only) tasks: scheduled apart from slotted work.

They need no slot, so they never block, are never blocked by, and never preempt slotted
work (a CPU notebook can start while a GPU job waits). Each goes to the schedulable agent
of its pool offering its environment (the image's CPU name: a task without slots is a CPU
task) that runs the fewest zero-slot tasks (ties by agent id), below the pool's
`max_zero_slot_per_agent` (Determined's max_aux_containers_per_agent). One heap per
environment asked for keeps each choice O(environments · log agents); entries are checked
against the agent's current count when popped.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from controlplane.scheduler.environment import Image
from controlplane.scheduler.model import AgentSnapshot, Placement, PoolPolicy, Request


def place(policy: PoolPolicy, ordered: Sequence[Request], agents: Sequence[AgentSnapshot]) -> list[Placement]:
    """Placements for the zero-slot requests of `ordered` (already in scheduling order)."""
    cap = policy.max_zero_slot_per_agent
    tasks = {a.agent_id: a.zero_slot_tasks for a in agents if a.schedulable}
    by_id = {a.agent_id: a for a in agents if a.schedulable}
    heaps: dict[str, list[tuple[int, str]]] = {}  # CPU environment name -> (tasks, agent id)
    serving: dict[str, list[str]] = {}  # agent id -> the environments whose heaps hold it

    def heap_for(image: Image) -> list[tuple[int, str]]:
        name = image.for_slot_type("cpu")
        if name not in heaps:
            heap = [(n, a) for a, n in tasks.items() if n < cap and name in by_id[a].environments]
            heapq.heapify(heap)
            heaps[name] = heap
            for _, a in heap:
                serving.setdefault(a, []).append(name)
        return heaps[name]

    out: list[Placement] = []
    for req in ordered:
        if req.slots_needed > 0:
            continue
        heap = heap_for(req.image)
        while heap and heap[0][0] != tasks[heap[0][1]]:
            heapq.heappop(heap)  # stale: the agent took a task of another environment since
        if not heap:
            continue  # every agent offering it is at its cap: it waits
        n, agent_id = heapq.heappop(heap)
        out.append(Placement(req.allocation_id, ((agent_id, ()),)))
        tasks[agent_id] = n + 1
        if n + 1 < cap:
            for name in serving[agent_id]:
                heapq.heappush(heaps[name], (n + 1, agent_id))
    return out
