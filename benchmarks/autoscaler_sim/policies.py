"""The two scaling rules the simulation compares, each driven when its real loop would run it.

`PlannerPolicy` feeds the real `controlplane.autoscaler.plan()` exactly what the reconciler
(controlplane/master/autoscaling/reconciler.py) feeds it, and on a capacity error folds it back
with `on_launch_error` and plans again in the same tick, up to `REPLANS` times. It runs as the
master's AutoscalerService runs it (controlplane/master/autoscaling/service.py): every tick_s, and
also as soon as the orchestrator sees new unplaceable demand, at least `MIN_TICK_GAP_S` apart
(`wake_gap_s`; cluster.py does the timing).

`DeterminedRule` is Determined's provisioner rebuilt from determined-internals.md §1.2-1.3 (not
through the planner): desired = ceil(pending slots / slots per agent), nothing subtracted for free
capacity; terminate agents idle longer than `max_idle_agent_period` down to `min_instances`; launch
max(0, clamp(min - current, desired - recentlyLaunched, max - current)) in its one zone. Its loop
is periodic only: the provisioner ticks every 5 s (`actionCooldown`, §1.1 loop 2 and §8); the
scheduler's 500 ms tick only pushes it new ScalingInfo (§1.1 calls the two loops decoupled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from benchmarks.autoscaler_sim.cluster import CapacityError, Cluster, Instance
from controlplane.autoscaler import (
    AgentView,
    Blocked,
    Demand,
    InstanceView,
    LaunchFailure,
    PendingLaunch,
    PoolScaling,
    TaskView,
    on_launch_error,
    on_launch_success,
    plan,
)

REPLANS = 6  # the reconciler's MAX_REPLANS
MIN_TICK_GAP_S = 1.0  # service.py's MIN_TICK_GAP_S (a test checks they agree)


@dataclass
class IdleClock:
    """When each connected agent was first seen idle at a tick (both the reconciler and
    Determined's scale decider keep this; it resets as soon as the agent runs anything)."""

    since: dict[str, float] = field(default_factory=dict)

    def update(self, now: float, agents: list[Instance]) -> None:
        seen = {a.id for a in agents}
        self.since = {k: v for k, v in self.since.items() if k in seen}
        for a in agents:
            if a.jobs:
                self.since.pop(a.id, None)
            else:
                self.since.setdefault(a.id, now)


@dataclass
class PlannerPolicy:
    cfg: PoolScaling
    name: str = "this autoscaler"
    wake_gap_s: float | None = MIN_TICK_GAP_S  # None: tick only, as before the wake-up existed
    blocked: list[Blocked] = field(default_factory=list)
    failures: LaunchFailure = field(default_factory=LaunchFailure)
    in_flight: list[PendingLaunch] = field(default_factory=list)
    idle: IdleClock = field(default_factory=IdleClock)
    plan_calls: int = 0
    drains: int = 0
    _n: int = 0

    def tick(self, now: float, cluster: Cluster) -> None:
        cfg = self.cfg
        listed = cluster.alive()
        seen = {i.request_id for i in listed}
        self.in_flight = [p for p in self.in_flight if p.launch_request_id not in seen
                          and now - p.requested_at < cfg.max_agent_starting_period_s]
        connected = [i for i in listed if i.registered]
        self.idle.update(now, connected)
        views = [InstanceView(i.id, "running" if i.registered else "pending", i.launched_at, i.zone,
                              i.instance_type or cfg.instance_types[0], False, i.request_id, True) for i in listed]
        agents = [AgentView(a.id, self.idle.since.get(a.id), a.slots, a.free, a.draining, a.draining,
                            tuple(TaskView(str(job.id), per, job.start or now, movable=True, moves=job.moves,
                                           spans_agents=hosts > 1)
                                  for job, per, hosts in a.tasks.values()))
                  for a in connected]
        demand = Demand(tuple(j.gpus for j in cluster.pending))
        gone: set[str] = set()
        for _ in range(REPLANS):
            self.plan_calls += 1
            d = plan(cfg, demand, views, agents, self.blocked, self.failures, now, in_flight=self.in_flight)
            for t in d.terminations:
                if t.instance_id not in gone:
                    cluster.terminate(t.instance_id, now)
                    gone.add(t.instance_id)
            for drain in d.drains:
                cluster.drain(drain.instance_id, now)
                self.drains += 1
            views = [v for v in views if v.instance_id not in gone]
            agents = [a for a in agents if a.agent_id not in gone]
            if not self._launch_all(d.launches, now, cluster):
                break

    def _launch_all(self, launches: list[Any], now: float, cluster: Cluster) -> bool:
        """True when a launch hit a capacity error and the planner should be asked again."""
        for launch in launches:
            self._n += 1
            req = f"r{self._n}"
            try:
                cluster.launch(launch.count, launch.zone, req, now, launch.instance_type)
            except CapacityError as e:
                self.blocked, self.failures = on_launch_error(
                    self.cfg, "no_capacity", launch.zone, launch.instance_type, launch.spot, str(e),
                    self.blocked, self.failures, now)
                return True
            self.failures = on_launch_success(self.failures)
            self.in_flight.append(PendingLaunch(req, launch.count, now, launch.instance_type, launch.zone,
                                                launch.spot))
        return False


@dataclass
class DeterminedRule:
    slots_per_agent: int
    min_instances: int
    max_instances: int
    max_idle_agent_period_s: float
    max_agent_starting_period_s: float
    zone: str  # one zone per pool, no failover (§2.1 of peers.md)
    name: str = "Determined rule"
    wake_gap_s: float | None = None  # periodic only (§1.1): nothing wakes the provisioner early
    idle: IdleClock = field(default_factory=IdleClock)
    _n: int = 0

    def desired_new_instances(self, pending_slots: list[int]) -> int:
        """§1.2: sum the slots of pending tasks that could ever fit, ceil by slots per agent."""
        s = self.slots_per_agent
        total = sum(n for n in pending_slots if n <= s or n % s == 0)
        return math.ceil(total / s)

    def tick(self, now: float, cluster: Cluster) -> None:
        instances = cluster.alive()  # this tick's List(); stays the snapshot for the whole tick
        connected = [i for i in instances if i.registered]
        self.idle.update(now, connected)
        recently_launched = [i for i in instances if not i.registered
                             and i.launched_at + self.max_agent_starting_period_s > now]
        long_idle = sorted((i for i in connected if i.id in self.idle.since
                            and now > self.idle.since[i.id] + self.max_idle_agent_period_s),
                           key=lambda i: self.idle.since[i.id])
        # §1.3 termination order: stopped, long-disconnected (neither happens here), long idle
        # never below min_instances; over max_instances never happens here (max is not reached)
        spare = len(instances) - self.min_instances
        for inst in long_idle[:max(0, spare)]:
            cluster.terminate(inst.id, now)
        current = len(instances)
        desired = self.desired_new_instances([j.gpus for j in cluster.pending])
        lo, hi = self.min_instances - current, self.max_instances - current
        n = max(0, max(lo, min(desired - len(recently_launched), hi)))  # clamp(lo, x, hi), then max(0, ·)
        if n:
            self._n += 1
            cluster.launch(n, self.zone, f"d{self._n}", now)
