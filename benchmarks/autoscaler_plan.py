"""One autoscaler planning tick for a pool of 1,000 instances/agents and 10,000 pending gangs.

Instances are a seeded mix: most running with agents (a third of those idle, some past the idle
period), some booting, a few stopped, never-registered or leaked; gangs are 1-, 2-, 4- and
8-slot on 8-slot instances, with a few that can never fit. Prints the median and p95 of
`plan()` and ends with one key=value line.

    .venv/bin/python benchmarks/autoscaler_plan.py [--instances 1000] [--gangs 10000] [--repeat 25]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from controlplane.autoscaler import (
    AgentView,
    Blocked,
    Demand,
    InstanceView,
    LaunchFailure,
    PoolScaling,
    plan,
)
from controlplane.state.instance import InstanceState

NOW = 1_000_000.0


def scenario(n_instances: int, n_gangs: int, seed: int = 7
             ) -> tuple[PoolScaling, Demand, list[InstanceView], list[AgentView], list[Blocked]]:
    rng = random.Random(seed)
    cfg = PoolScaling(pool="gpu", instance_types=("g5.48xlarge", "p4d.24xlarge"), zones=("a", "b", "c"),
                      slots_per_instance=8, spot=True, spot_fallback_to_on_demand=True, min_instances=10,
                      max_instances=n_instances + 200, max_idle_agent_period_s=600, max_agent_starting_period_s=600)
    instances: list[InstanceView] = []
    agents: list[AgentView] = []
    for k in range(n_instances):
        iid = f"i-{k:05d}"
        r = rng.random()
        state: InstanceState = "running"
        age, known = rng.uniform(700, 20_000), True
        if r < 0.05:
            state, age = "pending", rng.uniform(0, 500)
        elif r < 0.06:
            state = "stopped"
        elif r < 0.07:
            known = False
        instances.append(InstanceView(iid, state, NOW - age, rng.choice("abc"), "g5.48xlarge", True, f"r{k}", known))
        if state == "running" and r >= 0.08:  # 0.07-0.08: never registered
            idle_since = NOW - rng.uniform(0, 1_200) if rng.random() < 0.33 else None
            agents.append(AgentView(iid, idle_since, 8))
    gangs = tuple(rng.choice([1, 1, 2, 2, 4, 8, 16]) for _ in range(n_gangs)) + (12,) * 5
    blocked = [Blocked("spot:a:g5.48xlarge", NOW + 100, "no capacity: InsufficientInstanceCapacity")]
    return cfg, Demand(gangs), instances, agents, blocked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--gangs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=25)
    args = ap.parse_args()
    cfg, demand, instances, agents, blocked = scenario(args.instances, args.gangs)
    times = []
    d = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        d = plan(cfg, demand, instances, agents, blocked, LaunchFailure(), NOW)
        times.append((time.perf_counter() - t0) * 1000)
    assert d is not None
    times.sort()
    median = statistics.median(times)
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    launched = sum(launch.count for launch in d.launches)
    print(f"plan(): {len(instances)} instances, {len(agents)} agents, {len(demand.gangs)} gangs, {args.repeat} runs")
    print(f"  median {median:.2f} ms, p95 {p95:.2f} ms")
    print(f"  decision: launch {launched}, terminate {len(d.terminations)}, {len(d.explanation)} explanation lines")
    for line in d.explanation[-3:]:
        print(f"    {line[:160]}")
    print(f"instances={len(instances)} agents={len(agents)} gangs={len(demand.gangs)} repeat={args.repeat} "
          f"median_ms={median:.2f} p95_ms={p95:.2f} launch={launched} terminate={len(d.terminations)}")


if __name__ == "__main__":
    main()
