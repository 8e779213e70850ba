"""The simulated cloud and cluster on a fake clock: instances that boot in `boot_s` and bill per
second from launch to termination, agents that register when the boot ends, and one scheduler
(FIFO with backfill, best fit) shared by every scaling policy; only the policy's tick differs.

Arrivals, boot completions and job completions are events at their exact times; the scheduler
runs after each of them (Determined's runs within 500 ms of a change). The policy runs at time 0,
then `tick_s` after its previous run; a policy with `wake_gap_s` set (the planner, as the master's
AutoscalerService) also runs when a scheduler pass leaves a job unplaced that the previous pass did
not (orchestrator.py `_wake_autoscaler_for_new_demand`), but never sooner than min(wake_gap_s,
tick_s) after its previous run: a wake inside that gap runs at the gap's end, and every run restarts
the `tick_s` wait. A policy without it (Determined's provisioner) runs every `tick_s` only.
"""

from __future__ import annotations

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
    registered: bool = False  # boot done, agent connected
    jobs: int = 0
    terminated_at: float | None = None


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
    instances: dict[str, Instance] = field(default_factory=dict)
    pending: list[Job] = field(default_factory=list)  # arrived, not placed; FIFO
    capacity_errors: int = 0
    _events: list[Any] = field(default_factory=list)
    _seq: int = 0
    _unplaced: set[int] = field(default_factory=set)  # job ids the last scheduler pass left pending

    # --- what a policy sees and does ---------------------------------------------------------
    def alive(self) -> list[Instance]:
        return [i for i in self.instances.values() if i.terminated_at is None]

    def launch(self, count: int, zone: str, request_id: str, now: float) -> list[Instance]:
        if zone in self.no_capacity_zones:
            self.capacity_errors += 1
            raise CapacityError(f"InsufficientInstanceCapacity in zone {zone}")
        out = []
        for _ in range(count):
            inst = Instance(f"i-{len(self.instances):05d}", zone, request_id, now, self.slots)
            self.instances[inst.id] = inst
            self._push(now + self.boot_s, BOOTED, inst)
            out.append(inst)
        return out

    def terminate(self, instance_id: str, now: float) -> None:
        inst = self.instances[instance_id]
        if inst.jobs:
            raise AssertionError(f"policy terminated {instance_id} while it runs {inst.jobs} jobs")
        inst.terminated_at = now

    # --- the simulation ---------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, obj))

    def run(self, policy: Policy) -> Result:
        for j in self.jobs:
            j.start = None
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
            runs += 1
            peak = max(peak, len(self.alive()))
            last, now = now, now + self.tick_s
        # every instance is terminated once the loop ends
        billed = sum(cast(float, i.terminated_at) - i.launched_at for i in self.instances.values())
        return Result(policy.name, billed, [j.wait for j in self.jobs], len(self.instances), peak,
                      self.capacity_errors, runs)

    def _apply(self, t: float, kind: int, _seq: int, obj: object) -> None:
        if kind == ARRIVAL:
            self.pending.append(obj)  # type: ignore[arg-type]
        elif kind == BOOTED:
            inst: Instance = obj  # type: ignore[assignment]
            if inst.terminated_at is None:
                inst.registered = True
        else:
            for inst, n in obj:  # type: ignore[attr-defined]
                inst.free += n
                inst.jobs -= 1

    def _schedule(self, now: float) -> bool:
        """FIFO with backfill: each pending gang in arrival order takes the best-fit agent (fewest
        free slots that hold it); a gang of k·slots takes k wholly free agents. True when it left a
        job pending that the previous pass did not (what wakes the master's autoscaler)."""
        if not self.pending:
            return False  # as the orchestrator: no pass, the unplaced set stays as it was
        agents = [i for i in self.alive() if i.registered]
        left = []
        for job in self.pending:
            hosts = self._fit(job.gpus, agents)
            if hosts is None:
                left.append(job)
                continue
            per = min(job.gpus, self.slots)
            for h in hosts:
                h.free -= per
                h.jobs += 1
            job.start = now
            self._push(now + job.duration, DONE, [(h, per) for h in hosts])
        self.pending = left
        unplaced = {j.id for j in left}
        fresh, self._unplaced = unplaced - self._unplaced, unplaced
        return bool(fresh)

    def _fit(self, gpus: int, agents: list[Instance]) -> list[Instance] | None:
        if gpus <= self.slots:
            fits = [a for a in agents if a.free >= gpus]
            return [min(fits, key=lambda a: (a.free, a.id))] if fits else None
        whole = [a for a in agents if a.free == self.slots][: gpus // self.slots]
        return whole if len(whole) == gpus // self.slots else None
