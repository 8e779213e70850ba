"""One pool, several instance shapes: each launch is the shape of least cost per used slot."""

from __future__ import annotations

from controlplane.autoscaler.keys import capacity_key
from controlplane.autoscaler.model import Blocked, InstanceView, PendingLaunch, Shape
from tests.controlplane.autoscaler.scenarios import NOW, idle, pool, run

G5 = (Shape("g5.xlarge", 1, 1.006), Shape("g5.12xlarge", 4, 5.672), Shape("g5.48xlarge", 8, 16.288))


def mixed(**kw: object):
    return pool(shapes=G5, zones=("a",), **kw)


def launches(d) -> dict[str, int]:
    out: dict[str, int] = {}
    for launch in d.launches:
        out[launch.instance_type] = out.get(launch.instance_type, 0) + launch.count
    return out


def test_three_one_slot_trials_get_one_slot_instances_and_a_four_slot_gang_a_four_slot_one():
    d = run(mixed(), gangs=[1, 1, 1, 4])
    assert launches(d) == {"g5.xlarge": 3, "g5.12xlarge": 1}
    assert all("g5." in r for r in d.explanation if r.startswith("launch"))


def test_an_eight_slot_gang_gets_the_eight_slot_shape():
    assert launches(run(mixed(), gangs=[8])) == {"g5.48xlarge": 1}


def test_a_blocked_shape_fails_over_to_another_shape_that_holds_the_gang():
    blocked = [Blocked(capacity_key("a", "g5.xlarge", False), NOW + 600, "no capacity: none left")]
    assert launches(run(mixed(), gangs=[1], blocked=blocked)) == {"g5.12xlarge": 1}


def test_booting_instances_count_with_their_own_shapes_slots():
    booting = InstanceView("i-1", "pending", NOW - 10, "a", "g5.12xlarge", False, "", True)
    # the booting 4-slot instance will take four 1-slot trials; the fifth needs a new 1-slot one
    assert launches(run(mixed(), gangs=[1] * 5, instances=[booting])) == {"g5.xlarge": 1}
    unlisted = PendingLaunch("r1", 1, NOW - 5, "g5.xlarge", "a")
    assert launches(run(mixed(), gangs=[1, 1], in_flight=[unlisted])) == {"g5.xlarge": 1}


def test_a_pool_of_one_type_launches_exactly_as_before():
    single = pool(instance_types=("g5.12xlarge",), slots_per_instance=4, zones=("a",))
    d = run(single, gangs=[1, 1, 1, 4])
    assert launches(d) == {"g5.12xlarge": 2}


def test_an_idle_agent_is_used_before_anything_is_launched():
    inst = InstanceView("i-big", "running", NOW - 3600, "a", "g5.48xlarge", False, "", True)
    d = run(mixed(), gangs=[1], instances=[inst], agents=[idle("i-big", 30, slots=8)])
    assert launches(d) == {}
