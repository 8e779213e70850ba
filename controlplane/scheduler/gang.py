"""Which gang shapes a pool can ever run, and a message naming them when it cannot."""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.model import AgentSnapshot


def shape_error(slots_needed: int, agents: Sequence[AgentSnapshot], pool: str = "") -> str | None:
    """None when a gang of `slots_needed` fits the pool's agents (all idle), else why not."""
    if slots_needed <= 0 or not agents:
        return None
    counts: dict[int, int] = {}
    for a in agents:
        counts[len(a.slot_ids)] = counts.get(len(a.slot_ids), 0) + 1
    if any(k >= slots_needed for k in counts):
        return None
    if any(k and slots_needed % k == 0 and c >= slots_needed // k for k, c in counts.items()):
        return None
    largest = max(counts)
    gangs = sorted({k * m for k, c in counts.items() if k for m in range(2, c + 1)})
    sizes = ", ".join(f"{c} agent(s) of {k} slot(s)" for k, c in sorted(counts.items()))
    where = f" in pool {pool!r}" if pool else ""
    across = f"; or across idle agents of equal size: {', '.join(map(str, gangs))} slots" if gangs else ""
    return (f"a trial needing {slots_needed} slots cannot run{where}: it has {sizes}. Shapes that fit: "
            f"up to {largest} slots on one agent{across}")
