"""Scale-up: demand on hypothetical instances, booting capacity, min and max with launches in flight."""

from __future__ import annotations

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


def test_empty_pool_launches_for_demand_in_first_zone():
    d = run(pool(), gangs=[4, 4, 2, 1])
    (launch,) = d.launches
    assert (launch.count, launch.instance_type, launch.zone, launch.spot) == (3, "g5.xlarge", "us-west-2a", False)
    assert "need 3 new instances" in launch.reason


def test_booting_instances_absorb_demand_no_double_launch_across_ticks():
    cfg = pool()
    tick1 = run(cfg, gangs=[4, 4])
    assert launched(tick1) == 2
    # next tick: the two instances are listed, booting, no agent yet; demand is still unplaceable
    booting = [inst("i-1", "pending", age=20, req="r1"), inst("i-2", "pending", age=20, req="r1")]
    tick2 = run(cfg, gangs=[4, 4], instances=booting)
    assert launched(tick2) == 0
    assert said(tick2, "not scaling up", "2 booting")
    # a third gang needs exactly one more
    assert launched(run(cfg, gangs=[4, 4, 4], instances=booting)) == 1


def test_unlisted_in_flight_launch_counts_as_coming_capacity():
    cfg = pool()
    flight = [PendingLaunch("r1", 2, NOW - 5)]
    assert launched(run(cfg, gangs=[4, 4], in_flight=flight)) == 0
    # one of the two is listed now: still two coming, not three
    listed = [inst("i-1", "pending", age=5, req="r1")]
    assert launched(run(cfg, gangs=[4, 4], instances=listed, in_flight=flight)) == 0
    # an in-flight record older than the starting period no longer counts
    stale = [PendingLaunch("r0", 2, NOW - 11 * MIN)]
    assert launched(run(cfg, gangs=[4, 4], in_flight=stale)) == 2


def test_idle_agents_absorb_demand():
    d = run(pool(), gangs=[2, 2], instances=[inst("i-1")], agents=[idle("i-1", 60)])
    assert launched(d) == 0


def test_max_holds_counting_every_instance_and_launch_in_flight():
    cfg = pool(max_instances=4)
    instances = [inst("i-1"), inst("i-2", "pending", age=10)]
    flight = [PendingLaunch("r9", 1, NOW - 1)]
    d = run(cfg, gangs=[4] * 10, instances=instances, agents=[busy("i-1")], in_flight=flight)
    assert launched(d) == 1  # 1 running + 1 pending + 1 unlisted = 3; room for 1
    assert said(d, "launching 1 of the 8 wanted", "max_instances 4")


def test_max_reached_is_explained():
    cfg = pool(max_instances=2)
    d = run(cfg, gangs=[4, 4, 4], instances=[inst("i-1"), inst("i-2")], agents=[busy("i-1"), busy("i-2")])
    assert launched(d) == 0
    assert said(d, "max_instances 2 reached", "3 pending gangs")


def test_instances_being_terminated_still_count_toward_max():
    cfg = pool(max_instances=2)
    d = run(cfg, gangs=[4, 4], instances=[inst("i-1"), inst("i-2", "stopped")], agents=[busy("i-1")])
    assert terminated(d) == ["i-2"]
    assert launched(d) == 0 and said(d, "max_instances 2 reached")


def test_launch_per_tick_cap():
    d = run(pool(max_launch_per_tick=2), gangs=[4] * 5)
    assert launched(d) == 2 and said(d, "max_launch_per_tick 2")


def test_min_instances_launched_with_no_demand():
    d = run(pool(min_instances=2))
    assert launched(d) == 2 and said(d, "min_instances 2 needs 2 more")
    # booting ones count toward min
    assert launched(run(pool(min_instances=2), instances=[inst("i-1", "pending", age=5)])) == 1


def test_unfittable_gang_is_explained_not_scaled_for():
    d = run(pool(), gangs=[6])
    assert launched(d) == 0
    assert said(d, "1 pending gang of 6 slots can never fit", "multiple of 4")


def test_multi_instance_gang_needs_whole_instances():
    d = run(pool(), gangs=[8])
    assert launched(d) == 2


def test_zero_slot_demand_does_not_launch():
    d = run(pool(), gangs=[0, 0])
    assert launched(d) == 0 and said(d, "no pending demand")


def test_same_inputs_same_decision():
    cfg = pool(min_instances=1)
    args = dict(gangs=[4, 2, 1], instances=[inst("i-1"), inst("i-9", known=False)], agents=[idle("i-1", 11 * MIN)])
    assert run(cfg, **args) == run(cfg, **args)  # type: ignore[arg-type]
