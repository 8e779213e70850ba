"""Which gang shapes a pool can ever run, and a message naming them when it cannot.

A gang (a trial's `slots_per_trial`) gets all its slots at once: on one agent, or across
whole idle agents of one size when it is a multiple of that size (Determined's fitting.go,
without `allow_heterogeneous_fits`). A shape no agent set can ever hold would wait forever,
so the master rejects it up front with this message. Every agent counts, busy or not. The
autoscaler may later pass hypothetical agents here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.model import AgentSnapshot


def fits_shapes(slots_needed: int, sizes: dict[int, int]) -> bool:
    """Would a gang fit agents of these sizes ({slots per agent: agent count}), all idle?"""
    if any(k >= slots_needed for k in sizes):
        return True
    return any(k and slots_needed % k == 0 and c >= slots_needed // k for k, c in sizes.items())


def shape_error(slots_needed: int, agents: Sequence[AgentSnapshot], pool: str = "") -> str | None:
    """None when a gang of `slots_needed` fits the pool's agents (all idle), else why not and
    which shapes would fit. No agents: None (nothing to judge by yet)."""
    if slots_needed <= 0 or not agents:
        return None
    sizes: dict[int, int] = {}
    for a in agents:
        sizes[len(a.slot_ids)] = sizes.get(len(a.slot_ids), 0) + 1
    if fits_shapes(slots_needed, sizes):
        return None
    pool = pool or agents[0].pool
    if len(sizes) == 1:
        have = f"agents have {next(iter(sizes))} slots each"
    else:
        have = "agents have " + ", ".join(f"{k} slots ({c} agent{'s' if c > 1 else ''})"
                                          for k, c in sorted(sizes.items()))
    across = [f"in multiples of {k} ({', '.join(str(k * m) for m in range(1, c + 1))})"
              for k, c in sorted(sizes.items()) if k and c > 1]
    where = f" or across idle agents of equal size {' or '.join(across)}" if across else ""
    return (f"a trial needing {slots_needed} slots cannot run in pool {pool!r}: {have}; a gang fits on one "
            f"agent (up to {max(sizes)} slots){where}")
