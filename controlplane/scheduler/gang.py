"""Which gang shapes a pool can ever run, and a message naming them when it cannot.

A gang (a trial's `slots_per_trial`) gets all its slots at once: on one agent, or across
whole idle agents of one size when it is a multiple of that size (Determined's fitting.go,
without `allow_heterogeneous_fits`). A shape no agent set can ever hold would wait forever,
so the master rejects it up front with this message. Every agent counts, busy or not. The
autoscaler may later pass hypothetical agents here too.

A task group (an OpenPAI job, ``Request.tasks``) is placed all at once too, but each task on one
agent of its own choosing, several tasks per agent allowed: first-fit decreasing (biggest task
first), each task best fit (or worst fit) among the agents' free slots. ``fits_group`` runs that
packing on idle agents; ``group_shape_error`` names why a group can never run.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.model import AgentSnapshot


def fits_shapes(slots_needed: int, sizes: dict[int, int]) -> bool:
    """Would a gang fit agents of these sizes ({slots per agent: agent count}), all idle?"""
    if any(k >= slots_needed for k in sizes):
        return True
    return any(k and slots_needed % k == 0 and c >= slots_needed // k for k, c in sizes.items())


def fits_group(tasks: Sequence[int], sizes: dict[int, int], best: bool = True) -> bool:
    """Would a task group fit agents of these sizes ({slots per agent: agent count}), all idle,
    packed as Capacity.find_group packs it (agents with equal free slots are interchangeable, so
    counts of agents per free-slot count are enough)? Zero-slot tasks need any agent."""
    free = {k: c for k, c in sizes.items() if c > 0}
    if not free:
        return False
    for t in sorted((t for t in tasks if t > 0), reverse=True):
        fitting = [f for f, c in free.items() if f >= t and c > 0]
        if not fitting:
            return False
        f = min(fitting) if best else max(fitting)
        free[f] -= 1
        free[f - t] = free.get(f - t, 0) + 1
    return True


def _sizes(agents: Sequence[AgentSnapshot]) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for a in agents:
        sizes[len(a.slot_ids)] = sizes.get(len(a.slot_ids), 0) + 1
    return sizes


def _have(sizes: dict[int, int]) -> str:
    if len(sizes) == 1:
        return f"agents have {next(iter(sizes))} slots each"
    return "agents have " + ", ".join(f"{k} slots ({c} agent{'s' if c > 1 else ''})" for k, c in sorted(sizes.items()))


def shape_error(slots_needed: int, agents: Sequence[AgentSnapshot], pool: str = "") -> str | None:
    """None when a gang of `slots_needed` fits the pool's agents (all idle), else why not and
    which shapes would fit. No agents: None (nothing to judge by yet)."""
    if slots_needed <= 0 or not agents:
        return None
    sizes = _sizes(agents)
    if fits_shapes(slots_needed, sizes):
        return None
    pool = pool or agents[0].pool
    have = _have(sizes)
    across = [f"in multiples of {k} ({', '.join(str(k * m) for m in range(1, c + 1))})"
              for k, c in sorted(sizes.items()) if k and c > 1]
    where = f" or across idle agents of equal size {' or '.join(across)}" if across else ""
    return (f"a trial needing {slots_needed} slots cannot run in pool {pool!r}: {have}; a gang fits on one "
            f"agent (up to {max(sizes)} slots){where}")


def _task_list(tasks: Sequence[int]) -> str:
    """The tasks' slot counts as given; a long list as counts per size, biggest first."""
    if len(tasks) <= 8:
        return ", ".join(str(t) for t in tasks)
    counts: dict[int, int] = {}
    for t in tasks:
        counts[t] = counts.get(t, 0) + 1
    return ", ".join(f"{t} (x{c})" if c > 1 else str(t) for t, c in sorted(counts.items(), reverse=True))


def group_shape_error(tasks: Sequence[int], agents: Sequence[AgentSnapshot], pool: str = "",
                      fitting_policy: str = "best") -> str | None:
    """None when a task group (one slot count per task) fits the pool's agents all idle, else one
    sentence saying why not: a task bigger than every agent (the message lists the tasks' slot
    counts and the agents' sizes), or more slots at once than the pool has, or tasks that do not
    pack onto the agents together.
    No agents, or no tasks: None (nothing to judge by)."""
    if not tasks or not agents:
        return None
    sizes = _sizes(agents)
    if fits_group(tasks, sizes, fitting_policy != "worst"):
        return None
    pool = pool or agents[0].pool
    job = f"a job whose tasks need {_task_list(tasks)} slots cannot run in pool {pool!r}"
    largest = max(sizes)
    if max(tasks) > largest:
        return f"{job}: {_have(sizes)}; each task must fit on one agent"
    total, have = sum(tasks), sum(k * c for k, c in sizes.items())
    if total > have:
        return f"{job}: it needs {total} slots at once and the pool has {have} ({_have(sizes)})"
    return f"{job}: {_have(sizes)}, and its tasks do not fit on them all at once, each task on one agent"
