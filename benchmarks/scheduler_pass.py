"""One scheduling pass over 10,000 pending requests and 1,000 agents, for both schedulers.

Requests are a seeded mix of 1-, 2-, 4- and 8-slot gangs from 500 jobs; agents have 8 slots,
a third of them partly busy. Prints the median and p95 pass time and placements per second.

    .venv/bin/python benchmarks/scheduler_pass.py [--pending 10000] [--agents 1000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from controlplane.scheduler.model import AgentSnapshot, PoolPolicy, Request, Running
from controlplane.scheduler.planner import plan


def scenario(n_pending: int, n_agents: int,
             seed: int = 7) -> tuple[list[Request], list[Running], list[AgentSnapshot]]:
    rng = random.Random(seed)
    agents, running = [], []
    for i in range(n_agents):
        used = tuple(range(rng.choice([0, 0, 2, 4, 8]))) if i % 3 == 0 else ()
        agents.append(AgentSnapshot(f"agent-{i:04d}", "default", tuple(range(8)), frozenset(used)))
        if used:
            running.append(Running(f"run-{i}", f"job-{i % 500}", "default", ((f"agent-{i:04d}", used),),
                                   priority=rng.randint(30, 70), started_at=float(i)))
    pending = [Request(f"alloc-{i}", f"job-{i % 500}", "default", rng.choice([1, 2, 4, 8]),
                       priority=rng.randint(1, 99), weight=rng.choice([1.0, 2.0]), submitted_at=float(i))
               for i in range(n_pending)]
    return pending, running, agents


def measure(kind: str, pending: list[Request], running: list[Running], agents: list[AgentSnapshot],
            repeat: int) -> tuple[float, float, int, int]:
    """Median and p95 (nearest rank) pass time in ms, placements and preemptions per pass."""
    pools = {"default": PoolPolicy("default", scheduler=kind)}
    times, placed, preempted = [], 0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = plan(pools, pending, running, agents, 0.0)
        times.append((time.perf_counter() - t0) * 1000)
        placed, preempted = len(result.placements), len(result.preemptions)
    times.sort()
    p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
    return statistics.median(times), p95, placed, preempted


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pending", type=int, default=10_000)
    p.add_argument("--agents", type=int, default=1_000)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    pending, running, agents = scenario(args.pending, args.agents)
    figures = {}
    for kind in ("priority", "fair_share"):
        median, p95, placed, preempted = measure(kind, pending, running, agents, args.repeat)
        rate = placed / (median / 1000) if median else 0.0
        print(f"{kind}: {len(pending)} pending, {len(running)} running, {len(agents)} agents, {args.repeat} passes: "
              f"median {median:.1f} ms, p95 {p95:.1f} ms, {placed} placements and {preempted} preemptions per pass "
              f"= {rate:,.0f} placements/s", flush=True)
        figures.update({f"{kind}_median_ms": median, f"{kind}_p95_ms": p95, f"{kind}_placements_per_s": rate})
    print(" ".join(f"{k}={v:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
