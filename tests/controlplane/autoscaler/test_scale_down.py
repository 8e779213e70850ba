"""Scale-down and cleanup: idle past the period, min_instances, never-registered, stopped, leaks."""

from __future__ import annotations

import pytest

from controlplane.autoscaler.model import PendingLaunch
from tests.controlplane.autoscaler.scenarios import (
    MIN,
    NOW,
    busy,
    idle,
    inst,
    launched,
    pool,
    run,
    said,
    terminated,
)


@pytest.mark.parametrize(
    ("min_instances", "idle_for", "expect"),
    [
        (0, [11, 12, 5], ["i-2", "i-1"]),   # past the period, longest idle first; i-3 only 5m idle
        (1, [11, 12, 5], ["i-2", "i-1"]),   # i-3 still keeps the pool at min 1
        (2, [11, 12, 5], ["i-2"]),
        (3, [11, 12, 5], []),
        (0, [9, 9, 9], []),
    ],
)
def test_idle_past_period_terminated_never_below_min(min_instances, idle_for, expect):
    cfg = pool(min_instances=min_instances)
    instances = [inst(f"i-{k + 1}") for k in range(3)]
    agents = [idle(f"i-{k + 1}", m * MIN) for k, m in enumerate(idle_for)]
    d = run(cfg, instances=instances, agents=agents)
    assert terminated(d) == expect
    assert launched(d) == 0


def test_min_held_when_idle_is_explained():
    d = run(pool(min_instances=1), instances=[inst("i-123")], agents=[idle("i-123", 30 * MIN)])
    assert terminated(d) == []
    assert said(d, "idle agent i-123 kept: min_instances 1")


def test_idle_agent_needed_by_demand_is_kept():
    d = run(pool(), gangs=[4], instances=[inst("i-1"), inst("i-2")],
            agents=[idle("i-1", 30 * MIN), idle("i-2", 20 * MIN)])
    # one agent takes the gang (the more recently idle one), the longest idle goes
    assert terminated(d) == ["i-1"]
    assert launched(d) == 0


def test_idle_agent_needed_by_demand_kept_is_explained():
    d = run(pool(), gangs=[4], instances=[inst("i-1")], agents=[idle("i-1", 30 * MIN)])
    assert terminated(d) == [] and said(d, "idle agent i-1 kept: pending demand needs its 4 slots")


def test_never_registered_instance_is_terminated_with_reason():
    cfg = pool()
    d = run(cfg, instances=[inst("i-late", "running", age=11 * MIN), inst("i-young", "pending", age=9 * MIN)])
    assert terminated(d) == ["i-late"]
    assert said(d, "i-late never registered within 10m")


def test_agent_gone_counts_from_last_seen():
    cfg = pool()
    recent = inst("i-1", age=60 * MIN, seen_ago=2 * MIN)
    gone = inst("i-2", age=60 * MIN, seen_ago=15 * MIN)
    d = run(cfg, instances=[recent, gone])
    assert terminated(d) == ["i-2"] and said(d, "i-2 agent gone for 15m")


@pytest.mark.parametrize("state", ["stopped", "stopping"])
def test_stopped_and_stopping_instances_terminated_and_replaced_to_hold_min(state):
    d = run(pool(min_instances=1), instances=[inst("i-s", state)])
    assert terminated(d) == ["i-s"] and said(d, f"i-s is {state}")
    assert launched(d) == 1 and said(d, "min_instances 1 needs 1 more")


def test_leaked_instance_terminated_unless_in_flight_or_busy():
    leak = inst("i-leak", known=False, req="r-old")
    d = run(pool(), instances=[leak])
    assert terminated(d) == ["i-leak"] and said(d, "i-leak", "leaked")
    # its launch request is still in flight (DB record not read yet): not a leak
    flying = inst("i-new", "pending", age=5, known=False, req="r-new")
    d = run(pool(), instances=[flying], in_flight=[PendingLaunch("r-new", 1, NOW - 10)])
    assert terminated(d) == []
    # unknown but its agent runs work: adopted, not killed
    d = run(pool(), instances=[inst("i-adopt", known=False)], agents=[busy("i-adopt")])
    assert terminated(d) == [] and said(d, "i-adopt", "adopted")


def test_terminated_instances_are_ignored():
    d = run(pool(max_instances=1), gangs=[4], instances=[inst("i-gone", "terminated")])
    assert terminated(d) == [] and launched(d) == 1


def test_over_max_lets_idle_then_booting_go():
    cfg = pool(max_instances=2)
    instances = [inst("i-1"), inst("i-2"), inst("i-3"), inst("i-4", "pending", age=MIN)]
    agents = [busy("i-1"), idle("i-2", MIN), idle("i-3", 2 * MIN)]
    d = run(cfg, instances=instances, agents=agents)
    assert terminated(d) == ["i-3", "i-2"]  # over by 2: longest idle first; the booting one is spared
    assert said(d, "exceed max_instances 2")
