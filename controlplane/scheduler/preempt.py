"""Choosing the fewest victims whose slots let a gang fit, shared by both schedulers.

The caller decides who may be preempted and in which order (priority: lowest priority and
newest first; fair share: newest work of jobs over their share). Here we only answer: which
prefix of that order makes the gang fit once those slots come back, trimmed of victims the
gang would not actually use, and on which agents the gang will land. Slots of work
already preempting (and of victims chosen earlier in the pass, beyond what their request
needs) are "soon free": they count before any new victim, so nothing more is preempted than
needed and nobody is asked twice. A request that waits for slots reserves them (reserve()),
so lower-priority work cannot take the slots it waits for. Checking a candidate looks only at
the agents it touches, so a pass over all running work is linear, not quadratic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.model import Running

MAX_TRIM = 32  # trimming unneeded victims is quadratic; beyond this many, keep the prefix


def preempting(n: int, victims: Sequence[Running]) -> str:
    """Why a request that preempted work waits: for the slots it frees."""
    jobs = sorted({v.job_id for v in victims})
    named = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
    return (f"waiting for {n} slot{'s' if n != 1 else ''}: preempting {len(victims)} allocation"
            f"{'s' if len(victims) != 1 else ''} of job{'s' if len(jobs) != 1 else ''} {named} to make room")


def soon_free(running: Sequence[Running]) -> dict[str, int]:
    """Slots per agent that work already asked to preempt will give back: counted first."""
    soon: dict[str, int] = {}
    for r in running:
        if r.preempting:
            for agent_id, slots in r.resources:
                soon[agent_id] = soon.get(agent_id, 0) + len(slots)
    return soon


def freed_by(victims: Sequence[Running], cap: Capacity, soon: dict[str, int]) -> dict[str, int]:
    """Soon-free slots per agent still usable this pass: `soon` plus what the victims free."""
    freed = {a: x for a, x in soon.items() if a in cap.free and x > 0}
    for v in victims:
        for agent_id, slots in v.resources:
            if agent_id in cap.free:
                freed[agent_id] = freed.get(agent_id, 0) + len(slots)
    return freed


def landing(cap: Capacity, freed: dict[str, int], n: int) -> list[str] | None:
    """The agents a gang of n would land on once `freed` comes back (only those agents
    change), chosen as Capacity.find would; None if it still would not fit. One agent, or
    several whole agents of one size."""
    single = [a for a, extra in freed.items() if len(cap.free[a]) + extra >= n]
    if single:
        sign = 1 if cap.best else -1
        return [min(single, key=lambda a: (sign * (len(cap.free[a]) + freed[a]), a))]
    if n <= 1:
        return None
    new_idle: dict[int, list[str]] = {}
    for a, extra in freed.items():
        size = cap.size[a]
        if len(cap.free[a]) < size <= len(cap.free[a]) + extra:
            new_idle.setdefault(size, []).append(a)
    for size in sorted(new_idle, reverse=True):
        need = n // size
        if n % size or cap.idle_count(size) + len(new_idle[size]) < need:
            continue
        chosen = sorted(new_idle[size])[:need]
        return chosen + cap.lowest_idle(size, need - len(chosen))
    return None


def choose_victims(n: int, cap: Capacity, ordered: Sequence[Running], soon: dict[str, int],
                   allow: Callable[[Running, list[Running]], bool] = lambda v, chosen: True,
                   ) -> tuple[list[Running], list[str]] | None:
    """The victims (a prefix of `ordered` that `allow` accepts, then trimmed; none if soon-free
    slots suffice) and the agents the gang of n lands on once they are gone; None if all of
    them would not be enough."""
    freed = freed_by((), cap, soon)
    if landing(cap, freed, n) is not None:
        return [], landing(cap, freed, n) or []
    new_idle: dict[int, int] = {}  # size -> agents left idle by soon-free slots and chosen victims
    for agent_id, extra in freed.items():
        free, size = len(cap.free[agent_id]), cap.size[agent_id]
        if free < size <= free + extra:
            new_idle[size] = new_idle.get(size, 0) + 1
    chosen: list[Running] = []
    fits = False
    for victim in ordered:
        if not any(a in cap.free for a, _ in victim.resources) or not allow(victim, chosen):
            continue
        chosen.append(victim)
        for agent_id, slots in victim.resources:
            if agent_id not in cap.free:
                continue
            free, size = len(cap.free[agent_id]), cap.size[agent_id]
            before = free + freed.get(agent_id, 0)
            after = before + len(slots)
            freed[agent_id] = after - free
            if after >= n:
                fits = True
            elif free < size and before < size <= after:
                new_idle[size] = new_idle.get(size, 0) + 1
                if n % size == 0 and cap.idle_count(size) + new_idle[size] >= n // size:
                    fits = True
        if fits:
            break
    if not fits:
        return None
    if len(chosen) <= MAX_TRIM:  # a victim on an agent the gang does not land on is spared
        for victim in reversed(chosen[:-1]):
            rest = [v for v in chosen if v is not victim]
            if landing(cap, freed_by(rest, cap, soon), n) is not None:
                chosen = rest
    where = landing(cap, freed_by(chosen, cap, soon), n)
    assert where is not None
    return chosen, where


def reserve(cap: Capacity, soon: dict[str, int], victims: Sequence[Running], where: list[str], n: int) -> None:
    """Hold for a waiting gang of n what it will use once `victims` are gone. On one agent it
    takes the soon-free slots first and the rest from slots free now; whole agents of a
    multi-agent gang leave the pass. Soon-free slots it does not need stay counted in `soon`."""
    freed = freed_by(victims, cap, soon)
    soon.update(freed)
    if len(where) > 1:
        for a in where:
            soon.pop(a, None)
        cap.exclude(where)
        return
    a = where[0]
    x = freed.get(a, 0)
    soon[a] = max(0, x - n)
    if n > x:
        cap.take(((a, tuple(cap.free[a][: n - x])),))
