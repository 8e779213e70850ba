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
    assert shape_error(4, agents) is None and shape_error(2, agents) is None and shape_error(0, agents) is None
    assert shape_error(3, agents) == (
        "a trial needing 3 slots cannot run in pool 'default': agents have 2 slots each; a gang fits on one "
        "agent (up to 2 slots) or across idle agents of equal size in multiples of 2 (2, 4)")
    assert "6" not in shape_error(5, agents, "default")  # only two agents: 4 is the largest gang


def test_shape_error_counts_busy_agents_and_names_mixed_sizes():
    agents = [agent("a", 2, used=(0, 1)), agent("b", 2, used=(0,)), agent("c", 4, pool="gpu")]
    assert shape_error(4, agents) is None  # busy or not, two 2-slot agents can hold 4 some day
    message = shape_error(5, agents, "gpu")
    assert message is not None and "pool 'gpu'" in message
    assert "2 slots (2 agents), 4 slots (1 agent)" in message and "up to 4 slots" in message
    assert shape_error(1, []) is None  # no agents yet: nothing to judge by


SCENARIOS = [
    # (name, agents, slots, fitting, expected resources or None)
    ("best fit packs the fullest agent", [agent("a", 4), agent("b", 4, used=(0, 1))], 2, "best", (("b", (2, 3)),)),
    ("worst fit spreads to the emptiest", [agent("a", 4), agent("b", 4, used=(0, 1))], 2, "worst", (("a", (0, 1)),)),
    ("ties go to the lowest agent id", [agent("z", 4), agent("m", 4), agent("q", 4)], 1, "best", (("m", (0,)),)),
    ("slot ids lowest first", [agent("a", 4, used=(0, 2))], 2, "best", (("a", (1, 3)),)),
    ("gang across the lowest-id idle agents", [agent("c", 2), agent("b", 2), agent("a", 2)], 4, "best",
     (("a", (0, 1)), ("b", (0, 1)))),
    ("gang needs equal sizes", [agent("a", 2), agent("b", 4, used=(0,))], 4, "best", None),
    ("gang skips unschedulable agents", [agent("a", 2), agent("b", 2, schedulable=False)], 4, "best", None),
    ("gang of 8 over four 2-slot agents", [agent(f"a{i}", 2) for i in range(4)], 8, "worst",
     tuple((f"a{i}", (0, 1)) for i in range(4))),
]


def test_fitting_scenarios():
    for name, agents, slots, fitting, expected in SCENARIOS:
        p = plan(pools(fitting_policy=fitting, preemption=False), [req("r", slots)], [], agents, NOW)
        got = p.placements[0].resources if p.placements else None
        assert got == expected, name
