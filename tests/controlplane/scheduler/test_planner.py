"""The planner: one pass over all pools, each with its own policy; unknown pools wait."""

from __future__ import annotations

from controlplane.scheduler.model import PoolPolicy
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, req


def test_pools_are_planned_apart_with_their_own_policy():
    policies = {"default": PoolPolicy("default"), "gpu": PoolPolicy("gpu", scheduler="fair_share")}
    pending = [req("d1", 1), req("g-a", 1, job="A", pool="gpu"), req("g-a2", 1, job="A", pool="gpu", submitted=1),
               req("g-b", 1, job="B", pool="gpu", submitted=2)]
    agents = [agent("d", 1), agent("g", 2, pool="gpu")]
    p = plan(policies, pending, [], agents, NOW)
    assert sorted((x.allocation_id, x.resources[0][0]) for x in p.placements) == [("d1", "d"), ("g-a", "g"),
                                                                                  ("g-b", "g")]


def test_unknown_pool_or_pool_without_agents_waits():
    policies = {"default": PoolPolicy("default"), "empty": PoolPolicy("empty")}
    pending = [req("nowhere", 1, pool="ghost"), req("empty", 1, pool="empty"), req("cpu", 0, pool="ghost")]
    p = plan(policies, pending, [], [agent("a", 1)], NOW)
    assert p.placements == [] and p.preemptions == []


def test_the_clock_does_not_change_the_plan():
    pending = [req(f"r{i}", 1 + i % 2, submitted=i) for i in range(6)]
    agents = [agent("a", 4), agent("b", 2)]
    assert plan({"default": PoolPolicy("default")}, pending, [], agents, 0.0) == plan(
        {"default": PoolPolicy("default")}, pending, [], agents, 1e9)
