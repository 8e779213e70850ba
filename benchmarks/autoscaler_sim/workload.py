"""A seeded job trace (Poisson arrivals, gangs of 1-16 GPUs, log-normal durations) and the
oracle lower bound on the instance-seconds any zero-wait policy must pay for it."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GANG_SIZES = (1, 2, 4, 8, 16)
GANG_WEIGHTS = (0.30, 0.20, 0.20, 0.20, 0.10)


@dataclass
class Job:
    id: int
    arrival: float
    gpus: int
    duration: float
    start: float | None = None  # first start, set by the simulated scheduler
    waited: float = 0.0  # time spent queued: before its start and after each move
    moves: int = 0  # times consolidation moved it
    move_cost_s: float = 0.0  # each move adds this to its run (lost work, restart) and to its wait

    @property
    def wait(self) -> float:
        """What the job's user waits: queued time plus each move's cost."""
        assert self.start is not None, f"job {self.id} never started"
        return self.waited + self.moves * self.move_cost_s


def make_trace(n_jobs: int, seed: int, mean_gap_s: float, median_duration_s: float, sigma: float) -> list[Job]:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for k in range(n_jobs):
        t += rng.expovariate(1.0 / mean_gap_s)
        gpus = rng.choices(GANG_SIZES, GANG_WEIGHTS)[0]
        jobs.append(Job(k, round(t, 3), gpus, round(rng.lognormvariate(math.log(median_duration_s), sigma), 3)))
    return jobs


@dataclass(frozen=True)
class Oracle:
    work_s: float  # GPU-seconds / GPUs per instance: instance-seconds of perfectly packed work
    starts: int  # instance starts the trace cannot avoid
    boot_s: float

    @property
    def instance_s(self) -> float:
        return self.work_s + self.starts * self.boot_s


def oracle(jobs: list[Job], gpus_per_instance: int, boot_s: float) -> Oracle:
    """Every job runs at its arrival on perfectly packed instances, so ceil(concurrent GPUs / G)
    instances are up at any time. The k-th of them starts each time that count rises to k, unless
    it fell below k for less than a boot (then keeping it idle is cheaper, and the oracle keeps it
    for free). Its bill is the work plus one boot per start: a lower bound for any policy that
    starts jobs on arrival; ours wait about one boot at most, which barely moves the peak."""
    events = sorted([(j.arrival, j.gpus) for j in jobs] + [(j.arrival + j.duration, -j.gpus) for j in jobs])
    gpus, level, starts = 0, 0, 0
    last_end: dict[int, float] = {}
    i = 0
    while i < len(events):
        t = events[i][0]
        while i < len(events) and events[i][0] == t:  # simultaneous events net out first
            gpus += events[i][1]
            i += 1
        new = math.ceil(gpus / gpus_per_instance)
        for k in range(level + 1, new + 1):
            if k not in last_end or t - last_end[k] > boot_s:
                starts += 1
        for k in range(new + 1, level + 1):
            last_end[k] = t
        level = new
    work = sum(j.gpus * j.duration for j in jobs) / gpus_per_instance
    return Oracle(work, starts, boot_s)
