"""The simulated cloud and cluster on a fake clock: instances that boot in `boot_s` and bill per
second from launch to termination, agents that register when the boot ends, and one scheduler
(FIFO with backfill, best fit) shared by every scaling policy; only the policy's tick differs.

A cluster has one instance shape (`slots`) or several (`shapes`: instance type -> slots, the
launch names the type). A policy may drain an instance (consolidation): its jobs stop at once,
each losing `move_cost_s` (added to its remaining run and counted in its wait), go back to the
queue in arrival order, and the instance takes no new work until it is terminated.

Arrivals, boot completions and job completions are events at their exact times; the scheduler
runs after each of them (Determined's runs within 500 ms of a change). The policy runs at time 0,
then `tick_s` after its previous run; a policy with `wake_gap_s` set (the planner, as the master's
AutoscalerService) also runs when a scheduler pass leaves a job unplaced that the previous pass did
not (orchestrator.py `_wake_autoscaler_for_new_demand`), but never sooner than min(wake_gap_s,
tick_s) after its previous run: a wake inside that gap runs at the gap's end, and every run restarts
the `tick_s` wait. A policy without it (Determined's provisioner) runs every `tick_s` only.
"""

from __future__ import annotations

import bisect
import heapq
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from benchmarks.autoscaler_sim.workload import Job

DONE, BOOTED, ARRIVAL = 0, 1, 2  # at equal times: free slots first, then new agents, then new jobs


class CapacityError(Exception):
    """The fake cloud's NoCapacity (InsufficientInstanceCapacity) for one zone."""


@dataclass
class Instance:
    id: str
    zone: str
    request_id: str
    launched_at: float
    free: int
    instance_type: str = ""
    slots: int = 0
    registered: bool = False  # boot done, agent connected
    jobs: int = 0
    terminated_at: float | None = None
    draining: bool = False
    tasks: dict[int, tuple[Job, int, int]] = field(default_factory=dict)  # job id -> (job, slots, hosts)

    def __post_init__(self) -> None:
        self.slots = self.slots or self.free


@dataclass
class _Run:
    """A job's current run: where, how many slots on each host, and until when."""

    job: Job
    hosts: list[Instance]
    per: int
    end: float


class Policy(Protocol):
    name: str
    wake_gap_s: float | None  # None: periodic only; else also woken by new unplaced demand, this far apart

    def tick(self, now: float, cluster: Cluster) -> None: ...


@dataclass
class Result:
    policy: str
    instance_s: float
    waits: list[float]
    starts: int
    peak_instances: int
    capacity_errors: int
    runs: int = 0  # times the policy ran (each one lists the cloud)
    moves: list[int] = field(default_factory=list)  # per job
    move_loss_gpu_s: float = 0.0
    by_type_s: dict[str, float] = field(default_factory=dict)  # instance-seconds per instance type

    @property
    def instance_hours(self) -> float:
        return self.instance_s / 3600

    @property
    def median_wait(self) -> float:
        return statistics.median(self.waits)

    @property
    def p95_wait(self) -> float:
        return p95(self.waits)


def p95(values: list[float]) -> float:
    """The 95th percentile, nearest rank."""
    w = sorted(values)
    return w[math.ceil(0.95 * len(w)) - 1]


@dataclass
class Cluster:
    jobs: list[Job]
    slots: int
    boot_s: float
    tick_s: float
    no_capacity_zones: frozenset[str] = frozenset()
    shapes: dict[str, int] = field(default_factory=dict)  # instance type -> slots; {}: every launch has `slots`
    move_cost_s: float = 120.0
    instances: dict[str, Instance] = field(default_factory=dict)
    pending: list[Job] = field(default_factory=list)  # arrived, not placed; FIFO
    capacity_errors: int = 0
    _events: list[Any] = field(default_factory=list)
    _seq: int = 0
    _unplaced: set[int] = field(default_factory=set)  # job ids the last scheduler pass left pending
    _runs: dict[int, _Run] = field(default_factory=dict)  # job id -> its current run
    _left: dict[int, float] = field(default_factory=dict)  # job id -> run time still to go when next placed
    _queued_at: dict[int, float] = field(default_factory=dict)
    _moved: bool = False

    # --- what a policy sees and does ---------------------------------------------------------
    def alive(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.terminated_at is None]

    def launch(self, count: int, zone: str, request_id: str, now: float, instance_type: str = "") -> list[Instance]:
        if zone in self.no_capacity_zones:
            self.capacity_errors += 1
            raise CapacityError(f"InsufficientInstanceCapacity in zone {zone}")
        slots = self.shapes.get(instance_type, self.slots)
        out = []
        for _ in range(count):
            inst = Instance(f"i-{len(self.instances):05d}", zone, request_id, now, slots, instance_type)
            self.instances[inst.id] = inst
            self._push(now + self.boot_s, BOOTED, inst)
            out.append(inst)
        return out

    def terminate(self, instance_id: str, now: float) -> None:
        inst = self.instances[instance_id]
        if inst.jobs:
            raise AssertionError(f"policy terminated {instance_id} while it runs {inst.jobs} jobs")
        inst.terminated_at = now

    def drain(self, instance_id: str, now: float) -> None:
        """Consolidation: the instance takes no new work; its jobs stop now (each losing the move
        cost) and queue again, in arrival order, to be placed on other instances' free slots."""
        inst = self.instances[instance_id]
        inst.draining = True
        for job_id in list(inst.tasks):
            run = self._runs.pop(job_id)
            for h in run.hosts:
                h.free += run.per
                h.jobs -= 1
                h.tasks.pop(job_id, None)
            job = run.job
            job.moves += 1
            job.move_cost_s = self.move_cost_s
            self._left[job.id] = run.end - now + self.move_cost_s
            self._queued_at[job.id] = now
            bisect.insort(self.pending, job, key=lambda j: (j.arrival, j.id))
            self._moved = True

    # --- the simulation ---------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, obj))

    def run(self, policy: Policy) -> Result:
        for j in self.jobs:
            j.start, j.waited, j.moves = None, 0.0, 0
            self._left[j.id] = j.duration
            self._queued_at[j.id] = j.arrival
            self._push(j.arrival, ARRIVAL, j)
        gap = None if policy.wake_gap_s is None else min(policy.wake_gap_s, self.tick_s)
        last, now, runs, peak = -math.inf, 0.0, 0, 0  # `now`: the policy's next run
        horizon = max(j.arrival + j.duration for j in self.jobs) + 86_400
        while True:
            if self._events and self._events[0][0] <= now:
                t = self._events[0][0]
                while self._events and self._events[0][0] == t:
                    self._apply(*heapq.heappop(self._events))
                if self._schedule(t) and gap is not None:  # new unplaceable demand wakes the policy
                    now = min(now, max(t, last + gap))
                continue
            alive = self.alive()
            if not self._events and not self.pending and not alive:
                break
            if now > horizon:
                raise AssertionError(f"{policy.name}: {len(alive)} instances still up a day after the last job")
            policy.tick(now, self)
            if self._moved:  # moved jobs are placed at once, as the orchestrator's next pass would
                self._moved = False
                self._schedule(now)
            runs += 1
            peak = max(peak, len(self.alive()))
            last, now = now, now + self.tick_s
        # every instance is terminated once the loop ends
        by_type: dict[str, float] = {}
        for i in self.instances.values():
            by_type[i.instance_type] = by_type.get(i.instance_type, 0.0) + cast(float, i.terminated_at) - i.launched_at
        moves = [j.moves for j in self.jobs]
        loss = sum(j.moves * j.move_cost_s * j.gpus for j in self.jobs)
        return Result(policy.name, sum(by_type.values()), [j.wait for j in self.jobs], len(self.instances), peak,
                      self.capacity_errors, runs, moves, loss, by_type)

    def _apply(self, t: float, kind: int, _seq: int, obj: object) -> None:
        if kind == ARRIVAL:
            self.pending.append(obj)  # type: ignore[arg-type]
        elif kind == BOOTED:
            inst: Instance = obj  # type: ignore[assignment]
            if inst.terminated_at is None:
                inst.registered = True
        else:
            run: _Run = obj  # type: ignore[assignment]
            if self._runs.get(run.job.id) is not run:
                return  # moved since: its slots were given back then
            del self._runs[run.job.id]
            for h in run.hosts:
                h.free += run.per
                h.jobs -= 1
                h.tasks.pop(run.job.id, None)

    def _schedule(self, now: float) -> bool:
        """FIFO with backfill: each pending gang in arrival order takes the best-fit agent (fewest
        free slots that hold it); a larger gang takes wholly free agents of one shape. True when it
        left a job pending that the previous pass did not (what wakes the master's autoscaler)."""
        if not self.pending:
            return False  # as the orchestrator: no pass, the unplaced set stays as it was
        agents = [i for i in self.alive() if i.registered and not i.draining]
        left = []
        for job in self.pending:
            hosts = self._fit(job.gpus, agents)
            if hosts is None:
                left.append(job)
                continue
            per = job.gpus // len(hosts)
            run = _Run(job, hosts, per, now + self._left[job.id])
            for h in hosts:
                h.free -= per
                h.jobs += 1
                h.tasks[job.id] = (job, per, len(hosts))
            if job.start is None:
                job.start = now
            job.waited += now - self._queued_at[job.id]
            self._runs[job.id] = run
            self._push(run.end, DONE, run)
        self.pending = left
        unplaced = {j.id for j in left}
        fresh, self._unplaced = unplaced - self._unplaced, unplaced
        return bool(fresh)

    def _fit(self, gpus: int, agents: list[Instance]) -> list[Instance] | None:
        fits = [a for a in agents if a.free >= gpus]
        if fits:
            return [min(fits, key=lambda a: (a.free, a.id))]
        for size in sorted({a.slots for a in agents}, reverse=True):
            if size >= gpus or gpus % size:
                continue
            whole = [a for a in agents if a.slots == size and a.free == size][: gpus // size]
            if len(whole) == gpus // size:
                return whole
        return None
