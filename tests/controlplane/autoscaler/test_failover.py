"""Zone and type failover within one tick, spot to on-demand fallback, and explained blocks."""

from __future__ import annotations

from controlplane.autoscaler.failures import on_launch_error, on_launch_success
from controlplane.autoscaler.model import Blocked, Decision, LaunchFailure, PoolScaling
from tests.controlplane.autoscaler.scenarios import NOW, pool, run, said


def _fail(cfg: PoolScaling, d: Decision, kind: str, msg: str, blocked: list[Blocked],
          failures: LaunchFailure, now: float = NOW) -> tuple[list[Blocked], LaunchFailure]:
    (launch,) = d.launches
    return on_launch_error(cfg, kind, launch.zone, launch.instance_type, launch.spot, msg, blocked, failures, now)  # type: ignore[arg-type]


def test_no_capacity_in_zone_a_launches_in_zone_b_same_tick():
    cfg = pool()
    blocked: list[Blocked] = []
    failures = LaunchFailure()
    d1 = run(cfg, gangs=[4, 4])
    assert d1.launches[0].zone == "us-west-2a"
    blocked, failures = _fail(cfg, d1, "no_capacity", "InsufficientInstanceCapacity", blocked, failures)
    assert [b.key for b in blocked] == ["zone:us-west-2a:g5.xlarge"]
    assert failures == LaunchFailure()  # capacity errors do not back off
    d2 = run(cfg, gangs=[4, 4], blocked=blocked, failures=failures)  # same tick, same now
    (launch,) = d2.launches
    assert (launch.zone, launch.count, launch.spot) == ("us-west-2b", 2, False)
    assert "skipping g5.xlarge in zone us-west-2a blocked until" in launch.reason
    assert "no capacity: InsufficientInstanceCapacity" in launch.reason


def test_quota_blocks_the_type_and_next_type_is_tried():
    cfg = pool(instance_types=("g5.xlarge", "g6.xlarge"))
    d1 = run(cfg, gangs=[4])
    blocked, failures = _fail(cfg, d1, "quota", "VcpuLimitExceeded", [], LaunchFailure())
    assert [b.key for b in blocked] == ["type:g5.xlarge"]
    (launch,) = run(cfg, gangs=[4], blocked=blocked, failures=failures).launches
    assert (launch.instance_type, launch.zone) == ("g6.xlarge", "us-west-2a")
    assert "type g5.xlarge blocked" in launch.reason and "quota: VcpuLimitExceeded" in launch.reason


def test_block_expires_after_cooldown():
    cfg = pool(launch_cooldown_s=300)
    blocked, _ = _fail(cfg, run(cfg, gangs=[4]), "no_capacity", "none", [], LaunchFailure())
    assert run(cfg, gangs=[4], blocked=blocked, now=NOW + 299).launches[0].zone == "us-west-2b"
    assert run(cfg, gangs=[4], blocked=blocked, now=NOW + 300).launches[0].zone == "us-west-2a"


def test_spot_capacity_walks_spot_options_then_falls_back_to_on_demand():
    cfg = pool(spot=True, spot_fallback_to_on_demand=True)
    blocked: list[Blocked] = []
    failures = LaunchFailure()
    zones = []
    for _ in range(2):
        d = run(cfg, gangs=[4], blocked=blocked, failures=failures)
        (launch,) = d.launches
        assert launch.spot
        zones.append(launch.zone)
        blocked, failures = _fail(cfg, d, "no_capacity", "InsufficientInstanceCapacity (spot)", blocked, failures)
    assert zones == ["us-west-2a", "us-west-2b"]
    assert {b.key for b in blocked} == {"spot:us-west-2a:g5.xlarge", "spot:us-west-2b:g5.xlarge"}
    (launch,) = run(cfg, gangs=[4], blocked=blocked, failures=failures).launches
    assert (launch.spot, launch.zone) == (False, "us-west-2a")
    assert "falling back to on-demand: every spot option is blocked" in launch.reason


def test_spot_without_fallback_waits_and_names_the_blocks():
    cfg = pool(spot=True, zones=("us-west-2a",))
    d = run(cfg, gangs=[4])
    blocked, failures = _fail(cfg, d, "no_capacity", "no spot capacity", [], LaunchFailure())
    d2 = run(cfg, gangs=[4], blocked=blocked, failures=failures)
    assert d2.launches == []
    assert said(d2, "not launching: every spot zone/type option is blocked",
                "spot g5.xlarge in zone us-west-2a blocked until", "no capacity: no spot capacity")


def test_spot_quota_is_separate_from_on_demand_quota():
    cfg = pool(spot=True, spot_fallback_to_on_demand=True, zones=("us-west-2a",))
    blocked, failures = _fail(cfg, run(cfg, gangs=[4]), "quota", "MaxSpotInstanceCountExceeded", [], LaunchFailure())
    assert [b.key for b in blocked] == ["spot-type:g5.xlarge"]
    (launch,) = run(cfg, gangs=[4], blocked=blocked, failures=failures).launches
    assert not launch.spot


def test_everything_blocked_is_explained_with_each_block():
    cfg = pool()
    blocked = [Blocked("zone:us-west-2a", NOW + 60, "no capacity: zone down"),
               Blocked("zone:us-west-2b:g5.xlarge", NOW + 120, "no capacity: stockout")]
    d = run(cfg, gangs=[4], blocked=blocked)
    assert d.launches == []
    assert said(d, "zone us-west-2a blocked until t=100060 (in 1m) (no capacity: zone down)",
                "g5.xlarge in zone us-west-2b blocked until")


def test_default_zone_when_no_zones_configured():
    cfg = pool(zones=())
    (launch,) = run(cfg, gangs=[4]).launches
    assert launch.zone == "" and "the default zone" in launch.reason
    blocked, _ = _fail(cfg, run(cfg, gangs=[4]), "no_capacity", "none", [], LaunchFailure())
    d = run(cfg, gangs=[4], blocked=blocked)
    assert d.launches == [] and said(d, "g5.xlarge in the default zone blocked")


def test_repeated_capacity_error_replaces_block_and_drops_expired():
    cfg = pool(launch_cooldown_s=300)
    old = [Blocked("zone:us-west-2a:g5.xlarge", NOW + 10, "no capacity: x"), Blocked("type:gone", NOW - 1, "quota: y")]
    blocked, _ = on_launch_error(cfg, "no_capacity", "us-west-2a", "g5.xlarge", False, "again", old,
                                 LaunchFailure(), NOW)
    assert blocked == [Blocked("zone:us-west-2a:g5.xlarge", NOW + 300, "no capacity: again")]


def test_success_resets_failures():
    assert on_launch_success(LaunchFailure(3, "transient error: x", NOW + 40)) == LaunchFailure()
