"""A long randomized run against an in-test fake cloud with faults: max_instances holds at every
tick, the same-tick replan reaches open zones, nothing is launched twice for the same demand,
and once demand is gone the pool shrinks to min_instances with nothing leaked or stopped left."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from controlplane.autoscaler import (
    AgentView,
    Blocked,
    Demand,
    InstanceView,
    LaunchFailure,
    PendingLaunch,
    on_launch_error,
    on_launch_success,
    plan,
)
from tests.controlplane.autoscaler.scenarios import pool

TICK = 5.0
BOOT = 60.0


@pytest.mark.parametrize("seed", range(8))
def test_randomized_fault_run_keeps_bounds_and_leaks_nothing(seed):
    rng = random.Random(seed)
    cfg = pool(min_instances=1, max_instances=6, instance_types=("g5.xlarge", "g6.xlarge"), spot=True,
               spot_fallback_to_on_demand=True, max_idle_agent_period_s=120, max_agent_starting_period_s=300,
               launch_cooldown_s=60)
    cloud: dict[str, InstanceView] = {}
    agents: dict[str, AgentView] = {}
    never_registers: set[str] = set()
    blocked: list[Blocked] = []
    failures = LaunchFailure()
    n = 0
    now = 0.0
    for tick in range(400):
        now = tick * TICK
        # the cloud moves: boots finish, a spot instance is stopped now and then, a leak appears
        for iid, i in list(cloud.items()):
            if i.state == "pending" and now - i.launched_at >= BOOT:
                cloud[iid] = replace(i, state="running")
                if iid not in never_registers:
                    agents[iid] = AgentView(iid, now, 4)
            if i.state == "running" and rng.random() < 0.005:
                cloud[iid] = replace(i, state="stopped")
                agents.pop(iid, None)
        if tick < 200 and rng.random() < 0.01:
            n += 1
            cloud[f"leak-{n}"] = InstanceView(f"leak-{n}", "running", now, "us-west-2a", "g5.xlarge", False, "", False)
        gangs = tuple(rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(0, 6))) if tick < 200 else ()
        for _attempt in range(10):  # plan, launch, on error replan in the same tick
            alive = [i for i in cloud.values() if i.state != "terminated"]
            d = plan(cfg, Demand(gangs), list(cloud.values()), list(agents.values()), blocked, failures, now)
            for t in d.terminations:
                cloud[t.instance_id] = replace(cloud[t.instance_id], state="terminated")
                agents.pop(t.instance_id, None)
            leaks = sum(1 for i in alive if not i.known)
            launched = sum(launch.count for launch in d.launches)
            assert len(alive) - leaks + launched <= cfg.max_instances, d.explanation
            assert all(e for e in d.explanation)
            if not d.launches:
                break
            (launch,) = d.launches
            fault = rng.random()
            if fault < 0.3:
                blocked, failures = on_launch_error(cfg, "no_capacity", launch.zone, launch.instance_type, launch.spot,
                                                    "ICE", blocked, failures, now)
                continue
            if fault < 0.35:
                blocked, failures = on_launch_error(cfg, "transient", launch.zone, launch.instance_type, launch.spot,
                                                    "5xx", blocked, failures, now)
                continue
            failures = on_launch_success(failures)
            for _ in range(launch.count):
                n += 1
                iid = f"i-{n}"
                cloud[iid] = InstanceView(iid, "pending", now, launch.zone, launch.instance_type, launch.spot,
                                          f"r{n}", True)
                if rng.random() < 0.05:
                    never_registers.add(iid)
            break
    left = [i for i in cloud.values() if i.state != "terminated"]
    assert all(i.known and i.state == "running" for i in left)
    assert len(left) == cfg.min_instances
    assert all(i.instance_id in agents for i in left)


def test_in_flight_launches_prevent_double_launch_until_listed():
    cfg = pool()
    d1 = plan(cfg, Demand((4, 4)), [], [], [], LaunchFailure(), 0.0)
    (launch,) = d1.launches
    flight = [PendingLaunch("r1", launch.count, 0.0, launch.instance_type, launch.zone, launch.spot)]
    for t in (5.0, 10.0, 15.0):  # the cloud does not list them yet
        assert plan(cfg, Demand((4, 4)), [], [], [], LaunchFailure(), t, in_flight=flight).launches == []
