"""Gangs: all slots at once or none, on one agent or across whole idle agents of equal size."""

from __future__ import annotations

from controlplane.scheduler.gang import shape_error
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req


def test_four_slots_on_two_idle_two_slot_agents_is_one_gang():
    p = plan(pools(), [req("g", 4)], [], [agent("a", 2), agent("b", 2)], NOW)
    assert len(p.placements) == 1
    assert p.placements[0].resources == (("a", (0, 1)), ("b", (0, 1)))


def test_no_gang_when_one_agent_is_partly_busy():
    p = plan(pools(preemption=False), [req("g", 4)], [], [agent("a", 2, used=(0,)), agent("b", 2)], NOW)
    assert p.placements == []


def test_one_agent_is_preferred_over_a_gang():
    p = plan(pools(), [req("g", 4)], [], [agent("a", 2), agent("b", 2), agent("c", 4)], NOW)
    assert p.placements[0].resources == (("c", (0, 1, 2, 3)),)


def test_impossible_shapes_are_named():
    agents = [agent("a", 2), agent("b", 2)]
    assert shape_error(4, agents) is None and shape_error(2, agents) is None
    message = shape_error(3, agents, "default")
    assert message is not None
    assert "3 slots" in message and "up to 2 slots on one agent" in message and "4 slots" in message
    assert "6" not in message  # only two agents: 4 is the largest gang
    assert shape_error(0, agents) is None
