"""Why a pending request was not placed: one short sentence per request, for `det job list`, `det pai
describe` and the web UI's queue.

Pure, and run after a pool's pass on what the pass left: the agents' free slots, CPUs and zero-slot
counts once its placements are taken. The first rule that holds names the reason:

1. the pool is not configured, has no connected agent, or only disabled/draining ones;
2. no agent offers its environment (``environment.image``; an OpenPAI job's ``gpuType``);
3. its job is at its ``max_slots``;
4. it can never fit the pool's agents, even idle (gang.py's messages; a task needing more CPUs than
   any agent has; fixed ports that tasks sharing a host cannot all get);
5. it could, but not now: the slots, CPUs or ports it waits for, and what the pool has free;
6. else it waits behind work ahead of it in the queue (a blocked head holds the agents it could use).

A reason the pass itself gave (``Plan.waiting``: preempting work for it) comes first. Computed per
pool with memos by environment and size, so thousands of pending trials cost little.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.scheduler import booking as bk
from controlplane.scheduler.environment import Image
from controlplane.scheduler.gang import fits_shapes, group_shape_error, shape_error
from controlplane.scheduler.model import AgentSnapshot, Placement, PoolPolicy, Request, Running


def _s(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def port_ranges(ports: frozenset[int]) -> str:
    """``{25000, 25001, 25002, 26000}`` -> ``25000-25002, 26000``."""
    runs: list[list[int]] = []
    for p in sorted(ports):
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class _Pool:
    """What one pool has left after its pass, with memos per environment."""

    def __init__(self, name: str, policy: PoolPolicy, running: Sequence[Running], agents: Sequence[AgentSnapshot],
                 placements: Sequence[Placement], by_id: Mapping[str, Request]) -> None:
        self.name = name
        self.policy = policy
        self.agents = [a for a in agents if a.schedulable]
        self.free = {a.agent_id: len(a.slot_ids) - len(a.used_slot_ids.intersection(a.slot_ids)) for a in self.agents}
        self.zero = {a.agent_id: a.zero_slot_tasks for a in self.agents}
        self._placed: list[tuple[Request, Placement]] = []  # what booked CPUs or ports this pass
        self._booking: bk.Booking | None = None
        self.job_slots: dict[str, int] = {}
        for r in running:
            self.job_slots[r.job_id] = self.job_slots.get(r.job_id, 0) + sum(len(s) for _, s in r.resources)
        for p in placements:
            req = by_id.get(p.allocation_id)
            if req is None:
                continue
            for agent_id, slots in p.resources:
                if slots and agent_id in self.free:
                    self.free[agent_id] -= len(slots)
                elif not slots and agent_id in self.zero:
                    self.zero[agent_id] += 1
            if req.books:
                self._placed.append((req, p))
            self.job_slots[req.job_id] = self.job_slots.get(req.job_id, 0) + req.slots_needed
        self._offering: dict[tuple[Image, bool], list[AgentSnapshot]] = {}
        self._gang: dict[tuple[Image, int], str] = {}  # a gang's reason by environment and size
        self._stat: dict[Image, tuple[int, int, int, dict[int, int]]] = {}

    @property
    def booking(self) -> bk.Booking:
        """The agents' CPUs and ports left after the pass (built when a group asks)."""
        if self._booking is None:
            self._booking = bk.Booking(self.agents)
            for req, p in self._placed:
                self._booking.book_group([a for a, _ in p.resources], req.task_cpus, req.task_ports)
        return self._booking

    def offering(self, image: Image, cpu_task: bool) -> list[AgentSnapshot]:
        key = (image, cpu_task)
        if key not in self._offering:
            self._offering[key] = [a for a in self.agents if (
                image.for_slot_type("cpu") in a.environments and image.fits_gpus(a.gpu_models) if cpu_task
                else a.offers(image))]
        return self._offering[key]

    def has(self, agents: Sequence[AgentSnapshot]) -> str:
        free = sum(self.free[a.agent_id] for a in agents)
        total = sum(len(a.slot_ids) for a in agents)
        return f"resource pool {self.name!r} has {free} free of {_s(total, 'slot')}"

    def explain(self, req: Request) -> str:
        cpu_task = req.slots_needed <= 0
        agents = self.offering(req.image, cpu_task)
        if not agents:
            gpus = f" with a GPU model matching {req.image.gpu_type!r}" if req.image.gpu_type else ""
            return (f"no connected agent of resource pool {self.name!r} offers the environment "
                    f"{req.image.describe()}{gpus}")
        n = req.slots_needed
        if req.max_slots is not None and self.job_slots.get(req.job_id, 0) + n > req.max_slots:
            return (f"its job holds {self.job_slots.get(req.job_id, 0)} slots of its max_slots "
                    f"{req.max_slots}; this needs {n} more")
        if req.tasks:
            return self._group(req, agents)
        if n <= 0:
            cap = self.policy.max_zero_slot_per_agent
            if all(self.zero[a.agent_id] >= cap for a in agents):
                return (f"every agent of resource pool {self.name!r} that could run it already runs "
                        f"{cap} CPU tasks (max_zero_slot_per_agent)")
            return f"waiting behind work ahead of it in the queue of resource pool {self.name!r}"
        key = (req.image, n)
        if key not in self._gang:
            self._gang[key] = self._gang_reason(req.image, n, agents)
        return self._gang[key]

    def _gang_reason(self, image: Image, n: int, agents: list[AgentSnapshot]) -> str:
        never = shape_error(n, agents, self.name)
        if never:
            return never
        free, total, most, idle = self._stats(image, agents)
        has = f"resource pool {self.name!r} has {free} free of {_s(total, 'slot')}"
        if free < n:
            return f"waiting for {_s(n, 'slot')}: {has}"
        if most < n and not fits_shapes(n, idle):
            return (f"waiting for {_s(n, 'slot')} on one agent (or on whole idle agents): {has}, at most {most} on "
                    f"one agent")
        return f"waiting behind work ahead of it in the queue: {has}"

    def _stats(self, image: Image, agents: list[AgentSnapshot]) -> tuple[int, int, int, dict[int, int]]:
        """Free slots, all slots, the most free on one agent, and idle agents per size, of these agents."""
        if image not in self._stat:
            idle: dict[int, int] = {}
            for a in agents:
                if self.free[a.agent_id] == len(a.slot_ids) and a.slot_ids:
                    idle[len(a.slot_ids)] = idle.get(len(a.slot_ids), 0) + 1
            self._stat[image] = (sum(self.free[a.agent_id] for a in agents), sum(len(a.slot_ids) for a in agents),
                                 max(self.free[a.agent_id] for a in agents), idle)
        return self._stat[image]

    def _group(self, req: Request, agents: list[AgentSnapshot]) -> str:
        tasks, cpus, ports = req.tasks, req.task_cpus, req.task_ports
        ids = {a.agent_id for a in agents}
        sizes = {a.agent_id: len(a.slot_ids) for a in agents}
        zero_cap = req.slots_needed <= 0
        room = {a: self.policy.max_zero_slot_per_agent for a in ids} if zero_cap else None
        # Never, with every agent idle: slots, then CPUs, then ports.
        if req.slots_needed > 0:
            never = group_shape_error(tasks, agents, self.name, self.policy.fitting_policy)
            if never:
                return never
        known = [c for a in ids if (c := self.booking.cpus.get(a)) is not None]
        if any(cpus) and known and len(known) == len(ids) and max(cpus) > max(known):
            return (f"a task needs {_s(max(cpus), 'CPU')}: agents of resource pool {self.name!r} have at most "
                    f"{max(known)}")
        best = self.policy.fitting_policy != "worst"
        if bk.pack(tasks, cpus, ports, sizes, self.booking, best, idle=True, room=room) is None:
            if any(ports):
                hosts = len({self.booking.host[a] for a in ids})
                return (f"its tasks' fixed ports ({port_ranges(frozenset().union(*ports))}) can never all be met: "
                        f"tasks wanting the same port need hosts of their own, and resource pool {self.name!r} "
                        f"has {_s(hosts, 'host')}")
            return f"its tasks do not fit the agents of resource pool {self.name!r} all at once, even idle"
        # Not now: what it waits for.
        free = {a: self.free[a] for a in ids}
        if req.slots_needed > sum(free.values()):
            at_once = f" for its {len(tasks)} tasks at once" if len(tasks) > 1 else ""
            return f"waiting for {_s(req.slots_needed, 'slot')}{at_once}: {self.has(agents)}"
        if bk.pack(tasks, (), (), free, self.booking, best, room=room) is None:
            if zero_cap:
                return (f"waiting for room for its {_s(len(tasks), 'CPU task')}: agents of resource pool "
                        f"{self.name!r} run up to {self.policy.max_zero_slot_per_agent} (max_zero_slot_per_agent)")
            return (f"waiting for its {_s(len(tasks), 'task')} to fit at once, each on one agent: "
                    f"{self.has(agents)}, at most {max(free.values())} on one agent")
        if any(cpus) and bk.pack(tasks, cpus, (), free, self.booking, best, room=room) is None:
            have = [c for a in ids if (c := self.booking.cpus_free.get(a)) is not None]
            most = max(have, default=0)
            need = f"its tasks need {', '.join(str(c) for c in cpus)} CPUs" if len(cpus) > 1 else \
                f"it needs {_s(cpus[0], 'CPU')}"
            return (f"waiting for CPUs: {need}, and agents of resource pool {self.name!r} have at most {most} free "
                    f"on one agent")
        if any(ports) and bk.pack(tasks, cpus, ports, free, self.booking, best, room=room) is None:
            held = frozenset().union(*ports) & frozenset().union(*self.booking.ports.values())
            what = f"ports {port_ranges(held)} are" if held else "the ports its tasks want are"
            return (f"waiting for ports: {what} held by other work on the hosts of resource pool {self.name!r} "
                    f"that could take its tasks")
        return f"waiting behind work ahead of it in the queue: {self.has(agents)}"


def explain(pool: str, policy: PoolPolicy | None, pending: Sequence[Request], running: Sequence[Running],
            agents: Sequence[AgentSnapshot], placements: Sequence[Placement],
            given: Mapping[str, str] | None = None) -> dict[str, str]:
    """allocation id -> why it waits, for every request of ``pending`` (one pool's) not in ``placements``."""
    placed = {p.allocation_id for p in placements}
    waiting = [r for r in pending if r.allocation_id not in placed]
    if not waiting:
        return {}
    by_id = {r.allocation_id: r for r in pending if r.allocation_id in placed}
    given = given or {}
    if policy is None:
        return {r.allocation_id: f"resource pool {pool!r} is not configured" for r in waiting}
    if not agents:
        return {r.allocation_id: f"no agent of resource pool {pool!r} is connected" for r in waiting}
    if not any(a.schedulable for a in agents):
        return {r.allocation_id: f"every agent of resource pool {pool!r} is disabled or draining" for r in waiting}
    state = _Pool(pool, policy, running, agents, placements, by_id)
    return {r.allocation_id: given.get(r.allocation_id) or state.explain(r) for r in waiting}
