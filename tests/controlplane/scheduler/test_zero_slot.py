"""Zero-slot (CPU) tasks: scheduled apart from slotted work, capped per agent."""

from __future__ import annotations

from controlplane.scheduler.model import PoolPolicy
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, req, running


def test_capped_per_agent_and_not_blocked_by_slotted_work():
    policy = {"default": PoolPolicy("default", max_zero_slot_per_agent=2)}
    pending = [req("big", 8)] + [req(f"cpu{i}", 0, submitted=i) for i in range(5)]
    p = plan(policy, pending, [], [agent("a", 2, used=(0, 1), zero=1), agent("b", 2)], NOW)
    where = [(x.allocation_id, x.resources[0][0]) for x in p.placements]
    assert where == [("cpu0", "b"), ("cpu1", "a"), ("cpu2", "b")]


def test_not_blocked_by_a_blocked_head_nor_preempting_anything():
    run = [running("low", {"a": (0, 1)}, priority=90)]
    pending = [req("head", 2, priority=10), req("cpu", 0, priority=99)]
    p = plan({"default": PoolPolicy("default")}, pending, run, [agent("a", 2, used=(0, 1))], NOW)
    assert [(x.allocation_id, x.resources) for x in p.placements] == [("cpu", (("a", ()),))]
    assert [x.allocation_id for x in p.preemptions] == ["low"]  # for the head, not for the cpu task


def test_zero_slot_scenarios():
    # (name, policy, agents, number of cpu tasks, expected agents in order)
    cases = [
        ("least loaded first, ties by id", PoolPolicy("default"), [agent("b", 1, zero=1), agent("a", 1, zero=1),
                                                                  agent("c", 1, zero=3)], 3, ["a", "b", "a"]),
        ("cap reached everywhere", PoolPolicy("default", max_zero_slot_per_agent=1), [agent("a", 1, zero=1)], 2, []),
        ("unschedulable agents skipped", PoolPolicy("default"), [agent("a", 1, schedulable=False), agent("b", 1)], 1,
         ["b"]),
        ("fair share: FIFO", PoolPolicy("default", scheduler="fair_share", max_zero_slot_per_agent=1),
         [agent("a", 1)], 2, ["a"]),
    ]
    for name, policy, agents, count, expected in cases:
        pending = [req(f"cpu{i}", 0, submitted=i) for i in range(count)]
        p = plan({"default": policy}, pending, [], agents, NOW)
        assert [x.resources[0][0] for x in p.placements] == expected, name
    fifo = plan({"default": PoolPolicy("default", scheduler="fair_share", max_zero_slot_per_agent=1)},
                [req("late", 0, submitted=5, priority=1), req("early", 0, submitted=1, priority=99)], [],
                [agent("a", 1)], NOW)
    assert [x.allocation_id for x in fifo.placements] == ["early"]
