"""Zero-slot (CPU-only) tasks: scheduled apart from slotted work.

They need no slot, so they never block, are never blocked by, and never preempt slotted
work (a CPU notebook can start while a GPU job waits). Each goes to the schedulable agent
of its pool offering its environment (the image's CPU name: a task without slots is a CPU
task) that runs the fewest zero-slot tasks (ties by agent id), below the pool's
`max_zero_slot_per_agent` (Determined's max_aux_containers_per_agent). One heap per
environment asked for keeps each choice O(environments · log agents); entries are checked
against the agent's current count when popped.

A group of zero-slot tasks (an OpenPAI job or a TensorBoard: ``Request.tasks`` all 0) is placed
here too, whole or not at all, each task by the same rule, so a queued GPU job never holds it up.
Its tasks' CPUs and fixed ports (``Request.task_cpus``, ``task_ports``) are booked in the pool's
``Booking``, which the slotted pass before it has already booked into.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from controlplane.scheduler import booking as bk
from controlplane.scheduler.environment import Image
from controlplane.scheduler.model import AgentSnapshot, Placement, PoolPolicy, Request


def place(policy: PoolPolicy, ordered: Sequence[Request], agents: Sequence[AgentSnapshot],
          booking: bk.Booking | None = None) -> list[Placement]:
    """Placements for the zero-slot requests of `ordered` (already in scheduling order)."""
    cap = policy.max_zero_slot_per_agent
    booking = booking if booking is not None else bk.Booking(a for a in agents if a.schedulable)
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

    def group(req: Request) -> tuple[str, ...] | None:
        """An agent per task of a zero-slot group, each the least busy below the cap; None if any waits."""
        name = req.image.for_slot_type("cpu")
        counts = {a: n for a, n in tasks.items()
                  if name in by_id[a].environments and req.image.fits_gpus(by_id[a].gpu_models)}
        if req.books:
            found = bk.pack(req.tasks, req.task_cpus, req.task_ports, dict.fromkeys(counts, 0), booking,
                            load=counts, room={a: cap - n for a, n in counts.items()})
            return tuple(found) if found is not None else None
        picks: list[str] = []
        for _ in req.tasks:
            free = [a for a, n in counts.items() if n < cap]
            if not free:
                return None
            chosen = min(free, key=lambda a: (counts[a], a))
            counts[chosen] += 1
            picks.append(chosen)
        return tuple(picks)

    out: list[Placement] = []
    for req in ordered:
        if req.slots_needed > 0:
            continue
        if req.tasks:
            picks = group(req)
            if picks is None:
                continue  # not every task has room: the group waits
            booking.book_group(picks, req.task_cpus, req.task_ports)
            for agent_id in set(picks):
                tasks[agent_id] += picks.count(agent_id)
                if tasks[agent_id] < cap:
                    for name in serving.get(agent_id, []):
                        heapq.heappush(heaps[name], (tasks[agent_id], agent_id))
            out.append(Placement(req.allocation_id, tuple((a, ()) for a in picks)))
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
