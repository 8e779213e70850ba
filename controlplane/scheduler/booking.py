"""CPUs and fixed ports: what a task group's tasks book besides slots (``Request.task_cpus``,
``Request.task_ports``), and the packing that honours them.

An OpenPAI task declares ``cpuNumber``: it runs only on an agent with that many CPUs not booked by
the tasks already there (``AgentSnapshot.cpus - used_cpus``; an agent that did not report its CPUs
is not checked). A ``portList`` entry with a ``beginAt`` wants exactly those ports on its host,
which every agent of the host shares (``AgentSnapshot.host``, ``used_ports``): two tasks wanting
one port never share a host, nor does a task share it with live work holding the port. Trials and
commands book neither, so work that asks for no CPUs and no fixed ports is placed as before
(Capacity.find_group's heaps); a group that does book is packed here by a scan of the pool's agents,
with the same rules (biggest task first, best or worst fit on free slots, ties by agent id;
zero-slot tasks each to the agent holding fewest tasks, ties by id).

One ``Booking`` per pool and pass: every Capacity view of the pool and the zero-slot pass see it,
so CPUs and ports booked by one placement are gone for the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controlplane.scheduler.model import AgentSnapshot


class Booking:
    """Free CPUs per agent and held ports per host, for one pass over one pool."""

    def __init__(self, agents: Iterable[AgentSnapshot]) -> None:
        self.cpus: dict[str, int | None] = {}  # agent -> its CPUs (None: not reported)
        self.cpus_free: dict[str, int | None] = {}
        self.host: dict[str, str] = {}
        self.ports: dict[str, set[int]] = {}  # host -> ports held there
        for a in agents:
            self.cpus[a.agent_id] = a.cpus if a.cpus > 0 else None
            self.cpus_free[a.agent_id] = max(0, a.cpus - a.used_cpus) if a.cpus > 0 else None
            host = self.host[a.agent_id] = a.host or a.agent_id
            self.ports.setdefault(host, set()).update(a.used_ports)

    def knows_cpus(self) -> bool:
        return any(c is not None for c in self.cpus.values())

    def fits(self, agent_id: str, cpus: int, ports: frozenset[int], *, cpus_taken: int = 0,
             ports_taken: set[int] | frozenset[int] = frozenset(), idle: bool = False) -> bool:
        """Whether a task needing ``cpus`` and ``ports`` fits the agent besides what the group already
        took there (``cpus_taken`` on the agent, ``ports_taken`` on its host). ``idle``: as if nothing ran."""
        have = (self.cpus if idle else self.cpus_free).get(agent_id)
        if cpus and have is not None and have - cpus_taken < cpus:
            return False
        if ports:
            if not ports.isdisjoint(ports_taken):
                return False
            if not idle and not ports.isdisjoint(self.ports.get(self.host.get(agent_id, agent_id), ())):
                return False
        return True

    def book(self, agent_id: str, cpus: int, ports: frozenset[int]) -> None:
        free = self.cpus_free.get(agent_id)
        if cpus and free is not None:
            self.cpus_free[agent_id] = free - cpus
        if ports:
            self.ports.setdefault(self.host.get(agent_id, agent_id), set()).update(ports)

    def book_group(self, agents: Sequence[str], cpus: Sequence[int], ports: Sequence[frozenset[int]]) -> None:
        """Books a placed group: ``agents`` one per task, in the order of its tasks."""
        for i, agent_id in enumerate(agents):
            self.book(agent_id, cpus[i] if i < len(cpus) else 0, ports[i] if i < len(ports) else frozenset())


def needs(tasks: Sequence[int], cpus: Sequence[int], ports: Sequence[frozenset[int]],
          i: int) -> tuple[int, int, frozenset[int]]:
    return tasks[i], cpus[i] if i < len(cpus) else 0, ports[i] if i < len(ports) else frozenset()


def slotted_order(tasks: Sequence[int], cpus: Sequence[int], ports: Sequence[frozenset[int]]) -> list[int]:
    """The slotted tasks' indexes in packing order: most slots, then most CPUs, then most fixed ports first."""
    def key(i: int) -> tuple[int, int, int, int]:
        t, c, p = needs(tasks, cpus, ports, i)
        return -t, -c, -len(p), i

    return sorted((i for i, t in enumerate(tasks) if t > 0), key=key)


def pack(tasks: Sequence[int], cpus: Sequence[int], ports: Sequence[frozenset[int]], free: Mapping[str, int],
         booking: Booking, best: bool = True, *, idle: bool = False,
         load: Mapping[str, int] | None = None, room: Mapping[str, int] | None = None) -> list[str] | None:
    """An agent per task (in the order of ``tasks``), or None when some task fits nowhere; changes nothing.

    ``free``: the usable agents and their free slots. Slotted tasks go first, biggest (then most
    CPUs, then most fixed ports) first, ties by task order, each to the agent with the fewest free
    slots left (best; "worst": the most) that meets its CPUs and ports, ties by agent id. Zero-slot
    tasks then go in order, each to the fitting agent holding the fewest tasks (``load``: tasks it
    ran before, the zero-slot pass's count; plus this group's), ties by id; ``room``: how many more
    tasks an agent may take (the zero-slot cap). ``idle``: judged as if no work ran (could it ever fit)."""
    taken: dict[str, int] = {}  # agent -> slots of this group on it
    cpus_taken: dict[str, int] = {}
    holding: dict[str, int] = {}
    host_ports: dict[str, set[int]] = {}  # host -> fixed ports of this group there
    where: list[str | None] = [None] * len(tasks)
    load = load or {}
    host_of = booking.host

    def fits(a: str, i: int) -> bool:
        t, c, p = needs(tasks, cpus, ports, i)
        if free[a] - taken.get(a, 0) < t:
            return False
        if room is not None and holding.get(a, 0) >= room.get(a, 0):
            return False
        return booking.fits(a, c, p, cpus_taken=cpus_taken.get(a, 0),
                            ports_taken=host_ports.get(host_of.get(a, a), set()), idle=idle)

    def hold(a: str, i: int) -> None:
        t, c, p = needs(tasks, cpus, ports, i)
        taken[a] = taken.get(a, 0) + t
        cpus_taken[a] = cpus_taken.get(a, 0) + c
        holding[a] = holding.get(a, 0) + 1
        host_ports.setdefault(host_of.get(a, a), set()).update(p)
        where[i] = a

    agents = sorted(free)
    slotted = slotted_order(tasks, cpus, ports)
    for i in slotted:
        options = [a for a in agents if fits(a, i)]
        if not options:
            return None
        hold(min(options, key=lambda a: ((free[a] - taken.get(a, 0)) * (1 if best else -1), a)), i)
    for i, t in enumerate(tasks):
        if t > 0:
            continue
        options = [a for a in agents if fits(a, i)]
        if not options:
            return None
        hold(min(options, key=lambda a: (load.get(a, 0) + holding.get(a, 0), a)), i)
    return [a for a in where if a is not None]
