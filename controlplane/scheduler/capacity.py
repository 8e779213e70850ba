"""Free slots of one pool, indexed for fast gang fitting.

A scheduling pass places thousands of requests on a thousand agents, so a fit must not scan
every agent. Agents sit in heaps keyed by their number of free slots, and idle agents also
in heaps keyed by their size; a fit looks at a handful of distinct free counts (0..slots per
agent) and pops the lowest agent id, so every choice is deterministic (ties by agent id) and
costs O(sizes + log agents). Heaps are cleaned lazily: an entry is valid only while the
agent still has that many free slots and has not been excluded.

Within a pass, free counts only go down (placements, reservations, exclusions), which is what
makes the lazy heaps and the "hopeless" memo in priority.py sound.

Environments: a request runs only on agents offering its environment (``Request.image``). For each
environment that not every agent offers, the pool's Capacity keeps a view: a Capacity of just the
agents offering it. A request is fitted in its own view; a placement, reservation or exclusion
made through any view changes every view holding that agent, so all of them see one pool.

Task groups (``Request.tasks``, an OpenPAI job): find_group packs every task at once, each on one
agent, several tasks per agent allowed, by first-fit decreasing with best (or worst) fit. It only
looks at the free counts and at the agents the group already uses, so a fit costs
O(tasks · (sizes + tasks) · log agents), not a scan of the pool, and it changes nothing: the caller
take()s the result. A group whose tasks also book CPUs or fixed ports (``Request.books``) is packed
by booking.py's scan instead, with the pool's ``Booking`` that every view shares.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from controlplane.scheduler import booking as bk
from controlplane.scheduler.environment import DEFAULT_IMAGE, Image
from controlplane.scheduler.gang import fits_group, fits_shapes
from controlplane.scheduler.model import AgentSnapshot, Request

Resources = tuple[tuple[str, tuple[int, ...]], ...]


class Capacity:
    """Mutable working copy of one pool's schedulable agents for the length of one pass."""

    def __init__(self, agents: Iterable[AgentSnapshot], fitting_policy: str = "best",
                 images: Iterable[Image] = (), booking: bk.Booking | None = None) -> None:
        """``images``: the environments the pass's requests ask for, each given a view. ``booking``:
        the pool's CPUs and ports for this pass (shared with the zero-slot pass), else its own."""
        agents = [a for a in agents if a.schedulable]
        self.booking = booking if booking is not None else bk.Booking(agents)
        self.best = fitting_policy != "worst"
        self.free: dict[str, list[int]] = {}  # agents still usable this pass -> free slot ids, ascending
        self.size: dict[str, int] = {}  # every schedulable agent (excluded ones too) -> slot count
        self.count_by_size: dict[int, int] = {}  # schedulable agents per size: what "could ever fit" means
        self._by_free: dict[int, list[str]] = {}  # free count -> heap of agent ids (lazy)
        self._count_by_free: dict[int, int] = {}
        self._idle: dict[int, list[str]] = {}  # size -> heap of idle agent ids (lazy)
        self._idle_count: dict[int, int] = {}
        for a in agents:
            k = len(a.slot_ids)
            self.free[a.agent_id] = sorted(s for s in a.slot_ids if s not in a.used_slot_ids)
            self.size[a.agent_id] = k
            self.count_by_size[k] = self.count_by_size.get(k, 0) + 1
        for agent_id in sorted(self.free):
            self._index(agent_id)
        self._group: list[Capacity] = [self]  # this Capacity and its views: changes go to all
        self._views: dict[Image, Capacity] = {}
        for image in images:
            offering = [a for a in agents if a.offers(image)]
            if image not in self._views and len(offering) < len(agents):
                view = Capacity(offering, fitting_policy, booking=self.booking)
                view._group = self._group
                self._group.append(view)
                self._views[image] = view

    def view(self, image: Image = DEFAULT_IMAGE) -> Capacity:
        """The agents offering ``image`` (itself when every agent does). Only the images given
        at construction have views; an image without one is offered by every agent."""
        return self._views.get(image, self)

    # -- index upkeep ---------------------------------------------------------------------
    def _index(self, agent_id: str) -> None:
        n = len(self.free[agent_id])
        heapq.heappush(self._by_free.setdefault(n, []), agent_id)
        self._count_by_free[n] = self._count_by_free.get(n, 0) + 1
        k = self.size[agent_id]
        if n == k and k > 0:
            heapq.heappush(self._idle.setdefault(k, []), agent_id)
            self._idle_count[k] = self._idle_count.get(k, 0) + 1

    def _unindex(self, agent_id: str) -> None:
        n = len(self.free[agent_id])
        self._count_by_free[n] -= 1
        k = self.size[agent_id]
        if n == k and k > 0:
            self._idle_count[k] -= 1

    def _top(self, heap: list[str], valid: int, idle: bool) -> str:
        """The lowest valid agent id of a heap known to hold one; drops stale entries."""
        while True:
            a = heap[0]
            free = self.free.get(a)
            if free is not None and len(free) == valid and (not idle or valid == self.size[a]):
                return a
            heapq.heappop(heap)

    # -- queries ----------------------------------------------------------------------------
    def idle_count(self, size: int) -> int:
        return self._idle_count.get(size, 0)

    def find(self, n: int) -> Resources | None:
        """Where a gang of n slots fits now: one agent (best or worst fit, ties by agent id),
        else whole idle agents of one size (largest size first, lowest agent ids)."""
        counts = sorted((f for f, c in self._count_by_free.items() if f >= n and c > 0), reverse=not self.best)
        if counts:
            agent_id = self._top(self._by_free[counts[0]], counts[0], idle=False)
            return ((agent_id, tuple(self.free[agent_id][:n])),)
        if n <= 1:
            return None
        for k in sorted(self._idle_count, reverse=True):
            if k == 0 or k >= n or n % k or self._idle_count[k] < n // k:
                continue
            return tuple((a, tuple(self.free[a])) for a in self.lowest_idle(k, n // k))
        return None

    def lowest_idle(self, size: int, count: int) -> list[str]:
        """The `count` lowest-id idle agents of this size (at most as many as there are)."""
        heap = self._idle.get(size, [])
        chosen: list[str] = []
        while len(chosen) < min(count, self.idle_count(size)):
            chosen.append(self._top(heap, size, idle=True))
            heapq.heappop(heap)
        for a in chosen:  # a query does not consume: put them back
            heapq.heappush(heap, a)
        return chosen

    def find_group(self, tasks: Sequence[int]) -> Resources | None:
        """Where every task of a group fits now, all at once; None if any does not (nothing is
        placed then). One (agent, slot ids) entry per task, in the order of ``tasks``; agents may
        repeat, each task's slots lie on one agent, no slot is used twice.

        Slotted tasks go biggest first (ties: earlier task first), each to the agent with the
        fewest free slots left that still holds it (best fit; with fitting policy "worst" the
        most), ties to the lowest agent id; an agent's free slots are shared out lowest ids first
        in that order. Zero-slot tasks then go, in order, each to the usable agent holding the
        fewest tasks of this group so far (ties: lowest agent id), with slot ids ()."""
        taken: dict[str, int] = {}  # agent -> slots of this group on it
        holding: dict[str, int] = {}  # agent -> tasks of this group on it
        touched_at: dict[int, int] = {}  # free count (before the group) -> agents holding a task
        where: list[str | None] = [None] * len(tasks)

        def hold(agent_id: str, slots: int) -> None:
            if agent_id not in holding:
                holding[agent_id] = 0
                taken[agent_id] = 0
                n = len(self.free[agent_id])
                touched_at[n] = touched_at.get(n, 0) + 1
            holding[agent_id] += 1
            taken[agent_id] += slots

        def untouched_counts() -> list[int]:
            return [f for f, c in self._count_by_free.items() if c - touched_at.get(f, 0) > 0]

        for i in sorted((i for i, t in enumerate(tasks) if t > 0), key=lambda i: (-tasks[i], i)):
            t = tasks[i]
            options = [(free - taken[a], a) for a in holding if (free := len(self.free[a])) - taken[a] >= t]
            fits = [f for f in untouched_counts() if f >= t]
            if fits:
                f = min(fits) if self.best else max(fits)
                options.append((f, self._lowest_untouched(f, holding)))
            if not options:
                return None
            _, agent_id = min(options, key=lambda o: (o[0] if self.best else -o[0], o[1]))
            hold(agent_id, t)
            where[i] = agent_id
        for i, t in enumerate(tasks):
            if t > 0:
                continue
            counts = untouched_counts()
            if counts:  # an agent holding none of the group: the lowest id of those
                agent_id = min(self._lowest_untouched(f, holding) for f in counts)
            elif holding:
                agent_id = min(holding, key=lambda a: (holding[a], a))
            else:
                return None  # no usable agent at all
            hold(agent_id, 0)
            where[i] = agent_id
        agents = [a for a in where if a is not None]
        assert len(agents) == len(tasks)
        given: dict[str, int] = {}  # agent -> its free slots handed out so far
        slots: list[tuple[int, ...]] = [()] * len(tasks)
        for i in sorted((i for i, t in enumerate(tasks) if t > 0), key=lambda i: (-tasks[i], i)):
            start = given.get(agents[i], 0)
            slots[i] = tuple(self.free[agents[i]][start:start + tasks[i]])
            given[agents[i]] = start + tasks[i]
        return tuple(zip(agents, slots, strict=True))

    def find_request(self, req: Request) -> Resources | None:
        """Where a task group fits now (find_group), its tasks' CPUs and fixed ports too."""
        if not self._scans(req):
            return self.find_group(req.tasks)
        where = bk.pack(req.tasks, req.task_cpus, req.task_ports, {a: len(f) for a, f in self.free.items()},
                        self.booking, self.best)
        if where is None:
            return None
        given: dict[str, int] = {}
        slots: list[tuple[int, ...]] = [()] * len(req.tasks)
        for i in bk.slotted_order(req.tasks, req.task_cpus, req.task_ports):
            start = given.get(where[i], 0)
            slots[i] = tuple(self.free[where[i]][start:start + req.tasks[i]])
            given[where[i]] = start + req.tasks[i]
        return tuple(zip(where, slots, strict=True))

    def could_ever_fit_request(self, req: Request) -> bool:
        """could_ever_fit_group, its tasks' CPUs and fixed ports too (every agent idle)."""
        if not self._scans(req):
            return self.could_ever_fit_group(req.tasks)
        return bk.pack(req.tasks, req.task_cpus, req.task_ports, self.size, self.booking, self.best,
                       idle=True) is not None

    def agents_usable_by_request(self, req: Request) -> set[str]:
        """agents_usable_by_group, less the agents with too few CPUs for its smallest task."""
        usable = self.agents_usable_by_group(req.tasks)
        least = min(req.task_cpus, default=0)
        if not least:
            return usable
        cpus = self.booking.cpus
        return {a for a in usable if (n := cpus.get(a)) is None or n >= least}

    def take_request(self, req: Request, resources: Resources) -> None:
        """take() a group's placement, booking its tasks' CPUs and ports."""
        self.take(resources)
        if req.books:
            self.booking.book_group([a for a, _ in resources], req.task_cpus, req.task_ports)

    def _scans(self, req: Request) -> bool:
        """Whether the group is packed by booking.py: it wants fixed ports, or CPUs where agents say theirs."""
        return any(req.task_ports) or (any(req.task_cpus) and self.booking.knows_cpus())

    def _lowest_untouched(self, free: int, skip: dict[str, int]) -> str:
        """The lowest-id agent with `free` free slots that is not in `skip` (one is known to exist).
        Skipped agents are popped aside and pushed back: a query does not consume."""
        heap = self._by_free[free]
        aside: list[str] = []
        try:
            while True:
                agent_id = self._top(heap, free, idle=False)
                if agent_id not in skip:
                    return agent_id
                aside.append(heapq.heappop(heap))
        finally:
            for agent_id in aside:
                heapq.heappush(heap, agent_id)

    def could_ever_fit_group(self, tasks: Sequence[int]) -> bool:
        """Would the group fit if every schedulable agent of the pool (this view) were idle,
        packed as find_group packs it?"""
        return fits_group(tasks, self.count_by_size, self.best)

    def agents_usable_by_group(self, tasks: Sequence[int]) -> set[str]:
        """Agents (still usable this pass) a group could ever use: those big enough for its
        smallest slotted task; every usable agent when all its tasks are zero-slot."""
        smallest = min((t for t in tasks if t > 0), default=0)
        return {a for a in self.free if self.size[a] >= smallest}

    def could_ever_fit(self, n: int) -> bool:
        """Would a gang of n fit if every schedulable agent of the pool were idle?"""
        return fits_shapes(n, self.count_by_size)

    def agents_usable_by(self, n: int) -> set[str]:
        """Agents (still usable this pass) a gang of n could ever use: big enough alone, or of
        a size that tiles n with enough agents of that size in the pool."""
        sizes = {k for k, count in self.count_by_size.items()
                 if k >= n or (k and n % k == 0 and count >= n // k)}
        return {a for a in self.free if self.size[a] in sizes}

    # -- changes ----------------------------------------------------------------------------
    def take(self, resources: Resources) -> None:
        """Consume the given slots (a placement), in every view holding those agents."""
        for cap in self._group:
            cap._take(resources)

    def _take(self, resources: Resources) -> None:
        by_agent: dict[str, set[int]] = {}  # a task group may name an agent several times
        for agent_id, slots in resources:
            by_agent.setdefault(agent_id, set()).update(slots)
        for agent_id, taken in by_agent.items():
            free = self.free.get(agent_id)
            if free is None or taken.isdisjoint(free):
                continue  # excluded, or nothing to take (a zero-slot task): the index stays as is
            self._unindex(agent_id)
            self.free[agent_id] = [s for s in free if s not in taken]
            self._index(agent_id)

    def exclude(self, agent_ids: Iterable[str]) -> None:
        """Withdraw agents from the rest of this pass: held for a blocked head of the queue, or
        reserved for a request waiting on the slots its preemptions free. Every view."""
        agent_ids = list(agent_ids)
        for cap in self._group:
            cap._exclude(agent_ids)

    def _exclude(self, agent_ids: list[str]) -> None:
        for agent_id in agent_ids:
            if agent_id in self.free:
                self._unindex(agent_id)
                del self.free[agent_id]
