"""What each scaling policy pays, in dollars, for a window of a real production GPU trace.

The trace: Alibaba's cluster-trace-gpu-v2023 (``../shared/data/alibaba-gpu-v2023``, see its README):
every GPU pod created in days [--from-day, --to-day) is a job that arrives at its creation time
(shifted so the window starts at 0) and runs for its real duration (deletion - creation) on
``num_gpu`` GPUs of one instance (a pod sharing a GPU counts as one). The simulation is
``benchmarks/autoscaler_sim`` (instances boot in 60 s and bill per second; one FIFO + backfill,
best-fit scheduler for every policy) with the planner code the master runs.

Policies, priced by the catalogue's on-demand $/h:
- this autoscaler: the master's planner on one pool that may launch every shape of the catalogue
  (each launch the shape of least cost per used slot), consolidating underused instances by moving
  their jobs (each move costs the job ``--move-cost`` seconds of its GPUs, and as much wait; a job is
  moved at most ``--max-moves`` times). Every trace job is taken to be a trial that resumes from a
  checkpoint; its remaining time is estimated from its age (the trace has no progress);
- Determined's rule, one pool of the largest shape (same idle period, 120 s);
- Determined's rule, one pool per shape, each job sent by hand to the smallest shape that holds it
  (what an expert admin sets up);
- the dollar lower bound: every job on arrival, perfectly packed on the cheapest shapes that hold it
  (GPU-hours x the least $/GPU-hour of a shape with enough GPUs), boots and moves free.

A policy's wait is the time its jobs spend queued (before the first start and after each move) plus
each move's cost.

    .venv/bin/python benchmarks/autoscaler_trace.py --from-day 121 --to-day 135 --catalog aws-g5
    .venv/bin/python benchmarks/autoscaler_trace.py --from-day 134 --to-day 135 --catalog aws-p4d   # ~1 min
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.autoscaler_sim.cluster import Cluster, Result, p95
from benchmarks.autoscaler_sim.policies import DeterminedRule, PlannerPolicy
from benchmarks.autoscaler_sim.workload import Job
from controlplane.autoscaler import Consolidation, PoolScaling
from controlplane.autoscaler import Shape as PoolShape

DEFAULT_TRACE = (Path(__file__).resolve().parents[2]
                 / "shared/data/alibaba-gpu-v2023/openb_pod_list_default.until_day135.csv")
DAY_S = 86_400.0
BOOT_S = 60.0
TICK_S = 5.0
IDLE_S = 120.0
STARTING_S = 600.0
MAX_INSTANCES = 1000
ZONES = ("zone-a", "zone-b", "zone-c")


@dataclass(frozen=True)
class Shape:
    instance_type: str
    gpus: int
    usd_per_h: float  # on demand

    @property
    def usd_per_gpu_h(self) -> float:
        return self.usd_per_h / self.gpus


CATALOGS: dict[str, tuple[Shape, ...]] = {
    "aws-g5": (Shape("g5.xlarge", 1, 1.006), Shape("g5.12xlarge", 4, 5.672), Shape("g5.48xlarge", 8, 16.288)),
    "aws-p4d": (Shape("p4d.24xlarge", 8, 32.7726),),
}


def load_trace(path: Path, from_day: float, to_day: float) -> list[Job]:
    """The GPU pods created in [from_day, to_day), as jobs shifted to start at 0, in arrival order."""
    lo, hi = from_day * DAY_S, to_day * DAY_S
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus, created, deleted = int(row["num_gpu"]), float(row["creation_time"]), float(row["deletion_time"])
            if gpus > 0 and lo <= created < hi:
                rows.append((created - lo, gpus, max(1.0, deleted - created)))
    rows.sort()
    return [Job(i, arrival, gpus, duration) for i, (arrival, gpus, duration) in enumerate(rows)]


def fresh(jobs: list[Job]) -> list[Job]:
    return [Job(j.id, j.arrival, j.gpus, j.duration) for j in jobs]


@dataclass
class Priced:
    name: str
    usd: float
    instance_h: float
    waits: list[float]
    starts: int
    moves: list[int]
    move_loss_gpu_h: float
    by_type_h: dict[str, float]

    @property
    def p50(self) -> float:
        return statistics.median(self.waits)

    @property
    def p95(self) -> float:
        return p95(self.waits)


def priced(name: str, runs: list[tuple[Shape, Result]]) -> Priced:
    """Single-shape runs: every instance of a run is of its shape."""
    return Priced(name, sum(r.instance_s / 3600 * s.usd_per_h for s, r in runs), sum(r.instance_hours for _, r in runs),
                  [w for _, r in runs for w in r.waits], sum(r.starts for _, r in runs),
                  [m for _, r in runs for m in r.moves], sum(r.move_loss_gpu_s for _, r in runs) / 3600,
                  {s.instance_type: r.instance_hours for s, r in runs})


def priced_mixed(name: str, catalog: tuple[Shape, ...], r: Result) -> Priced:
    usd = {s.instance_type: s.usd_per_h for s in catalog}
    return Priced(name, sum(sec / 3600 * usd[t] for t, sec in r.by_type_s.items()), r.instance_hours, r.waits,
                  r.starts, r.moves, r.move_loss_gpu_s / 3600, {t: sec / 3600 for t, sec in r.by_type_s.items()})


def mixed_scaling(catalog: tuple[Shape, ...], max_moves: int, move_cost_s: float) -> PoolScaling:
    """One pool with every shape of the catalogue, consolidating."""
    return PoolScaling(pool="gpu", shapes=tuple(PoolShape(s.instance_type, s.gpus, s.usd_per_h) for s in catalog),
                       zones=ZONES, min_instances=0, max_instances=MAX_INSTANCES, max_idle_agent_period_s=IDLE_S,
                       max_agent_starting_period_s=STARTING_S, launch_cooldown_s=300.0,
                       consolidation=Consolidation(enabled=max_moves > 0, max_moves_per_trial=max_moves,
                                                   move_cost_s=move_cost_s))


def determined(shape: Shape) -> DeterminedRule:
    return DeterminedRule(shape.gpus, 0, MAX_INSTANCES, IDLE_S, STARTING_S, ZONES[1],
                          f"Determined, {shape.instance_type}")


def smallest_holding(catalog: tuple[Shape, ...], gpus: int) -> Shape:
    return min((s for s in catalog if s.gpus >= gpus), key=lambda s: (s.gpus, s.usd_per_h))


def lower_bound(jobs: list[Job], catalog: tuple[Shape, ...]) -> float:
    return sum(j.gpus * j.duration / 3600 * min(s.usd_per_gpu_h for s in catalog if s.gpus >= j.gpus) for j in jobs)


def whole_instance_bound(jobs: list[Job], catalog: tuple[Shape, ...]) -> float:
    """Every job on arrival, on the cheapest shape per GPU that holds it, on WHOLE instances: at
    each moment ceil(GPUs in use / GPUs per instance) instances of each shape, boots and moves free.
    With one shape this bounds every policy that starts jobs on arrival: instances come whole."""
    def cheapest(gpus: int) -> Shape:
        return min((s for s in catalog if s.gpus >= gpus), key=lambda s: s.usd_per_gpu_h)

    usd = 0.0
    for shape in catalog:
        mine = [j for j in jobs if cheapest(j.gpus) == shape]
        events = sorted([(j.arrival, j.gpus) for j in mine] + [(j.arrival + j.duration, -j.gpus) for j in mine])
        in_use, last = 0, 0.0
        for t, delta in events:
            usd += math.ceil(in_use / shape.gpus) * (t - last) / 3600 * shape.usd_per_h
            in_use, last = in_use + delta, t
    return usd


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--from-day", type=float, default=121)
    ap.add_argument("--to-day", type=float, default=135)
    ap.add_argument("--catalog", choices=sorted(CATALOGS), default="aws-g5")
    ap.add_argument("--max-moves", type=int, default=2, help="moves per job at most; 0: no consolidation (default 2)")
    ap.add_argument("--move-cost", type=float, default=120.0,
                    help="seconds of its GPUs a move costs a job (default 120)")
    a = ap.parse_args(argv)
    catalog = CATALOGS[a.catalog]
    jobs = load_trace(a.trace, a.from_day, a.to_day)
    if not jobs:
        raise SystemExit(f"no GPU pod was created in days [{a.from_day:g}, {a.to_day:g}) of {a.trace}")
    too_big = [j for j in jobs if j.gpus > max(s.gpus for s in catalog)]
    if too_big:
        raise SystemExit(f"{len(too_big)} jobs want more GPUs than any shape of {a.catalog} has")
    largest = max(catalog, key=lambda s: s.gpus)

    t0 = time.perf_counter()
    shapes = {s.instance_type: s.gpus for s in catalog}
    ours_run = Cluster(fresh(jobs), largest.gpus, BOOT_S, TICK_S, shapes=shapes, move_cost_s=a.move_cost).run(
        PlannerPolicy(mixed_scaling(catalog, a.max_moves, a.move_cost)))
    ours = priced_mixed("this autoscaler (one pool, every shape, consolidating)", catalog, ours_run)
    det_single = priced(f"Determined's rule, one pool of {largest.instance_type}",
                        [(largest, Cluster(fresh(jobs), largest.gpus, BOOT_S, TICK_S).run(determined(largest)))])
    per_shape_runs = []
    for shape in catalog:
        routed = [j for j in fresh(jobs) if smallest_holding(catalog, j.gpus) == shape]
        if routed:
            per_shape_runs.append((shape, Cluster(routed, shape.gpus, BOOT_S, TICK_S).run(determined(shape))))
    det_per_shape = priced("Determined's rule, one pool per shape (expert routing)", per_shape_runs)
    bound = lower_bound(jobs, catalog)
    whole = whole_instance_bound(jobs, catalog)
    sim_s = time.perf_counter() - t0

    gpu_h = sum(j.gpus * j.duration for j in jobs) / 3600
    sizes = {g: sum(1 for j in jobs if j.gpus == g) for g in sorted({j.gpus for j in jobs})}
    print(f"trace: {a.trace.name}, GPU pods created in days [{a.from_day:g}, {a.to_day:g}): {len(jobs):,} jobs, "
          f"{gpu_h:,.0f} GPU-hours; GPUs per job: " + ", ".join(f"{g}: {n}" for g, n in sizes.items()))
    listing = ", ".join(f"{s.instance_type} ({s.gpus} GPU, ${s.usd_per_h:g}/h)" for s in catalog)
    print(f"catalogue {a.catalog}: {listing}"
          f"; boot {BOOT_S:.0f} s, idle period {IDLE_S:.0f} s, per-second billing")
    print()
    print(f"{'policy':56} {'dollars':>10} {'x bound':>8} {'inst-h':>9} {'starts':>7} {'p50 wait':>9} {'p95 wait':>9} "
          f"{'moves':>6} {'max/job':>7} {'GPU-h lost':>10}")
    for r in (ours, det_single, det_per_shape):
        print(f"{r.name:56} {r.usd:10,.0f} {r.usd / bound:8.2f} {r.instance_h:9,.1f} {r.starts:7d} {r.p50:8.1f}s "
              f"{r.p95:8.1f}s {sum(r.moves):6d} {max(r.moves, default=0):7d} {r.move_loss_gpu_h:10.1f}")
    print(f"{'dollar lower bound (packed on arrival, cheapest shapes)':56} {bound:10,.0f} {1.0:8.2f}")
    print(f"{'whole-instance bound (the same, on whole instances)':56} {whole:10,.0f} {whole / bound:8.2f}")
    print(f"simulations took {sim_s:.1f} s")
    print("this autoscaler's instance-hours by shape: "
          + ", ".join(f"{t} {h:,.1f}" for t, h in sorted(ours.by_type_h.items())))
    print()
    checks = [
        (f"cost <= 1.00x Determined's expert per-shape pools: {ours.usd / det_per_shape.usd:.2f}x",
         ours.usd <= det_per_shape.usd),
        (f"cost <= {'1.05' if len(catalog) > 1 else '1.30'}x the lower bound: {ours.usd / bound:.2f}x "
         f"(whole instances alone cost {whole / bound:.2f}x it; ours is {ours.usd / whole:.2f}x that)",
         ours.usd <= bound * (1.05 if len(catalog) > 1 else 1.30)),
        (f"p95 wait <= boot + 60 s: {ours.p95:.1f} s", ours.p95 <= BOOT_S + 60),
        (f"no job moved more than twice: {max(ours.moves, default=0)}", max(ours.moves, default=0) <= 2),
        (f"GPU-hours lost to moves <= 2 % of the work: {100 * ours.move_loss_gpu_h / gpu_h:.2f} %",
         ours.move_loss_gpu_h <= 0.02 * gpu_h),
    ]
    for text, ok in checks:
        print(f"{'MET ' if ok else 'MISS'}  {text}")
    figures = {
        "jobs": len(jobs), "cost_usd": ours.usd, "instance_h": ours.instance_h, "p50_wait_s": ours.p50,
        "p95_wait_s": ours.p95, "det_single_cost_usd": det_single.usd, "det_per_shape_cost_usd": det_per_shape.usd,
        "det_per_shape_p95_wait_s": det_per_shape.p95, "oracle_cost_usd": bound, "whole_instance_bound_usd": whole,
        "moves": sum(ours.moves), "moves_max_per_job": max(ours.moves, default=0),
        "move_loss_fraction": ours.move_loss_gpu_h / gpu_h, "targets_met": sum(ok for _, ok in checks),
        "targets": len(checks),
    }
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return figures


if __name__ == "__main__":
    main()
