"""Consolidation: empty underused instances by moving their trials elsewhere, so the emptied
instances can be terminated. Pure, like the rest of the planner.

Two kinds of drain, both only for instances whose every task is a trial that can resume
(`TaskView.movable`), has been moved fewer than `max_moves_per_trial` times, runs on this agent
alone and is expected to run longer than its move cost (`move_cost_s`: the work since its
checkpoint and the restart):
- **onto free slots**: all its trials fit on other busy instances (the steadiest first; idle
  ones are on their way out, draining ones take nothing, none is drained in the same tick; with
  mixed shapes only where a slot costs no more than on the cheapest shape that holds the
  trial), each trial has run `min_runtime_s`, and terminating the instance saves more than the
  moves cost: its slots over the time it would otherwise stay up (the longest expected remaining
  time of its trials) beat `move_cost_s` of every moved slot. Young trials wait: on a real trace
  (benchmarks/autoscaler_trace.py) half the jobs end within 11 minutes, 95 % within 3.7 hours,
  and new work soon refills any slots a move fills, so moving them spends their moves (and their
  users' time) for nothing, while the few that run past 3 hours hold most of the GPU-hours;
- **onto a cheaper shape**: with mixed shapes, its trials packed onto new instances of the
  pool's open launch options cost less an hour than it does, by more than the moves cost over
  their expected remaining time (a 1-GPU trial left alone on an 8-GPU instance). Make before
  break: the cheap instances are launched first (`Consolidated.launches`), and the instance is
  drained only once idle agents of those shapes are there to take its trials, so a moved trial
  waits for its move, not for a boot (and the scheduler's best fit puts it on the small idle
  agent, not back on some bigger instance's free slots).
Remaining time is estimated from progress where the trial reports it, else by its age (work
that has run long tends to keep running). Least-loaded instances go first, dearest per slot first
among equals; never below `min_instances`, never above `max_instances`; at most
`MAX_DRAINS_PER_TICK` instances a tick (each move is a checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.autoscaler.keys import duration
from controlplane.autoscaler.model import AgentView, Consolidation, Drain, InstanceView, Move, PoolScaling, TaskView
from controlplane.autoscaler.packing import Option, pack
from controlplane.state import instance as INSTANCE

MAX_DRAINS_PER_TICK = 4
MAX_CANDIDATES = 64  # bounds a tick's work with thousands of agents; the least loaded come first


class _Room:
    """Free slots of the receiving agents, the steadiest first: the agent whose work is expected
    to run longest stays up longest, so a trial moved there is least likely to be moved again."""

    def __init__(self, agents: Sequence[AgentView], now: float, slot_usd: dict[str, float]) -> None:
        self.slot_usd = slot_usd  # agent -> its $/h per slot
        self.free = {a.agent_id: a.free_slots for a in agents}
        self.order = [a.agent_id for a in sorted(agents, key=lambda a: (-_horizon(a, now), a.free_slots, a.agent_id))
                      if a.free_slots > 0]
        self.total = sum(self.free.values())

    def place(self, tasks: Sequence[TaskView], exclude: str, max_slot_usd: dict[int, float]) -> list[Move] | None:
        """A receiver for every task (largest first), or None, and nothing taken, when one does not fit.
        A task of n slots goes only to an agent whose slots cost at most `max_slot_usd[n]` each."""
        if self.total - self.free.get(exclude, 0) < sum(t.slots for t in tasks):
            return None
        moves: list[Move] = []
        for t in sorted(tasks, key=lambda t: (-t.slots, t.task_id)):
            cap = max_slot_usd.get(t.slots, float("inf")) + 1e-9
            dest = next((x for x in self.order if x != exclude and self.free.get(x, 0) >= t.slots
                         and self.slot_usd.get(x, 0.0) <= cap), None)
            if dest is None:
                for m in moves:
                    self.free[m.to_agent] += m.slots
                    self.total += m.slots
                return None
            self.free[dest] -= t.slots
            self.total -= t.slots
            moves.append(Move(t.task_id, t.slots, dest))
        return moves

    def remove(self, agent_id: str) -> None:
        self.total -= self.free.pop(agent_id, 0)


@dataclass
class Consolidated:
    """This tick's drains, and the instances (type -> count) to launch for drains to come."""

    drains: list[Drain] = field(default_factory=list)
    launches: dict[str, int] = field(default_factory=dict)
    launch_reasons: list[str] = field(default_factory=list)


def _horizon(a: AgentView, now: float) -> float:
    """How long the agent's work is expected to keep it up: its longest expected remaining run."""
    return max((t.expected_remaining_s(now) for t in a.tasks), default=0.0)


def _movable(t: TaskView, c: Consolidation, now: float) -> bool:
    return (t.movable and not t.spans_agents and t.moves < c.max_moves_per_trial
            and t.expected_remaining_s(now) > c.move_cost_s)


def _onto_new(tasks: Sequence[TaskView], options: Sequence[Option]) -> tuple[dict[str, int], float]:
    """New instances (type -> count) of the cheapest shapes that hold the trials, and their $/h."""
    price = {o.instance_type: o.usd_per_hour for o in options}
    packing = pack([t.slots for t in tasks], [], options)
    if packing.unfittable:
        return {}, float("inf")
    return packing.new_by_type, sum(price[t] * n for t, n in packing.new_by_type.items())


def _onto_idle(tasks: Sequence[TaskView], new: dict[str, int], idle: dict[str, list[AgentView]]
               ) -> list[Move] | None:
    """Moves of the trials onto idle agents of the wanted types, best fit; None when too few are there."""
    agents = [a for t, n in new.items() for a in idle.get(t, [])[:n]]
    if sum(len(idle.get(t, [])[:n]) for t, n in new.items()) < sum(new.values()):
        return None
    free = {a.agent_id: a.slots for a in agents}
    moves = []
    for t in sorted(tasks, key=lambda t: (-t.slots, t.task_id)):
        dest = min((x for x, f in free.items() if f >= t.slots), key=lambda x: (free[x], x), default=None)
        if dest is None:
            return None
        free[dest] -= t.slots
        moves.append(Move(t.task_id, t.slots, dest))
    return moves


def consolidate(cfg: PoolScaling, agents: Sequence[AgentView], instances: Sequence[InstanceView], kept: int,
                now: float, options: Sequence[Option] = ()) -> Consolidated:
    """The instances to drain this tick, each with its moves and reason, and the cheap instances
    to launch first for drains onto a cheaper shape. `kept`: instances that stay up after this
    tick's terminations (never below `min_instances`); `options`: the shapes that can be launched
    now, with their prices."""
    out = Consolidated()
    c = cfg.consolidation
    if not c.enabled or c.max_moves_per_trial == 0:
        return out
    listed = {i.instance_id: i for i in instances if i.state != INSTANCE.TERMINATED}
    busy = [a for a in agents if a.tasks and not a.draining and not a.consolidating]

    def usd_per_hour(a: AgentView) -> float:
        inst = listed.get(a.agent_id)
        return cfg.price_of(inst.instance_type, inst.spot) if inst is not None else 0.0

    room = _Room(busy, now, {a.agent_id: usd_per_hour(a) / a.slots for a in busy})
    cheaper = cfg.mixed and any(o.usd_per_hour > 0 for o in options)
    if not room.total and not cheaper:
        return out
    idle: dict[str, list[AgentView]] = {}
    for a in sorted(agents, key=lambda a: a.agent_id):
        if not a.tasks and a.idle_since is not None and not a.draining and a.agent_id in listed:
            idle.setdefault(listed[a.agent_id].instance_type, []).append(a)
    # with mixed shapes, a trial moves onto free slots only where a slot costs no more than on the
    # cheapest shape that holds it: else the move would park it where the next move must take it away
    max_slot_usd = {n: min((o.usd_per_hour / o.slots for o in options if o.slots >= n), default=float("inf"))
                    for n in {t.slots for a in busy for t in a.tasks}} if cheaper else {}

    candidates = sorted((a for a in busy if a.agent_id in listed),
                        key=lambda a: (a.slots - a.free_slots, -usd_per_hour(a) / a.slots, a.agent_id))
    spare = kept - cfg.min_instances
    headroom = cfg.max_instances - len(listed)
    receiving: set[str] = set()
    for a in candidates[:MAX_CANDIDATES]:
        if spare <= 0 or len(out.drains) >= MAX_DRAINS_PER_TICK:
            break
        if a.agent_id in receiving or not all(_movable(t, c, now) for t in a.tasks):
            continue
        usd, horizon = usd_per_hour(a), _horizon(a, now)
        moved_slot_s = sum(t.slots for t in a.tasks) * c.move_cost_s
        move_usd = usd / a.slots * moved_slot_s / 3600
        used = a.slots - a.free_slots
        if (a.slots * horizon > moved_slot_s
                and all(now - t.started_at >= c.min_runtime_s for t in a.tasks)
                and (moves := room.place(a.tasks, a.agent_id, max_slot_usd)) is not None):
            room.remove(a.agent_id)
            receiving.update(m.to_agent for m in moves)
            spare -= 1
            saving = usd * horizon / 3600 - move_usd
            where = ", ".join(f"{m.task_id} → {m.to_agent}" for m in moves)
            what = "trial fits" if len(moves) == 1 else f"{len(moves)} trials fit"
            out.drains.append(Drain(a.agent_id, tuple(moves), (
                f"consolidating: agent {a.agent_id} uses {used} of {a.slots} slots; its {what} on other instances' "
                f"free slots ({where}); terminating it saves ${usd:.2f}/h, about ${saving:.2f} over the "
                f"{duration(horizon)} its work is expected to run, net of {duration(c.move_cost_s)} of each moved "
                "trial's slots"), usd, round(saving, 4)))
            continue
        if not cheaper:
            continue
        new, new_usd = _onto_new(a.tasks, options)
        saving = (usd - new_usd) * horizon / 3600 - move_usd
        if not new or saving <= 0:
            continue
        itype = listed[a.agent_id].instance_type
        shapes = ", ".join(f"{n} × {t}" for t, n in new.items())
        moves = _onto_idle(a.tasks, new, idle)
        if moves is None:  # make before break: launch the cheap shapes; drain once they are idle here
            count = sum(new.values())
            if count > headroom:
                continue
            headroom -= count
            for t, n in new.items():
                out.launches[t] = out.launches.get(t, 0) + n
            out.launch_reasons.append(
                f"consolidating: agent {a.agent_id} ({itype}, ${usd:.2f}/h) uses {used} of {a.slots} slots; its work "
                f"would run on {shapes} for ${new_usd:.2f}/h: launching those first, to move it there once they are up")
            continue
        for m in moves:
            idle[listed[m.to_agent].instance_type] = [x for x in idle[listed[m.to_agent].instance_type]
                                                     if x.agent_id != m.to_agent]
        room.remove(a.agent_id)  # emptied this tick: its free slots take no other instance's trials
        spare -= 1
        where = ", ".join(f"{m.task_id} → {m.to_agent}" for m in moves)
        out.drains.append(Drain(a.agent_id, tuple(moves), (
            f"consolidating: agent {a.agent_id} ({itype}, ${usd:.2f}/h) uses {used} of {a.slots} slots; its work "
            f"runs on {shapes} for ${new_usd:.2f}/h ({where}); moving it saves about ${saving:.2f} over the "
            f"{duration(horizon)} it is expected to run, net of {duration(c.move_cost_s)} of each moved trial's "
            "slots"), usd - new_usd, round(saving, 4)))
    return out
