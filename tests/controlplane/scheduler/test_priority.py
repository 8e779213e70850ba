"""The priority scheduler: order, preemption, backfill without delaying the head."""

from __future__ import annotations

from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req, running


def placed(p) -> list[str]:  # noqa: ANN001
    return [x.allocation_id for x in p.placements]


def test_lower_number_runs_first_then_queue_position_then_submission():
    pending = [req("late", 1, submitted=5), req("urgent", 1, priority=10, submitted=9),
               req("early", 1, submitted=1), req("moved-up", 1, submitted=7, position=-1)]
    p = plan(pools(), pending, [], [agent("a", 3)], NOW)
    assert placed(p) == ["urgent", "moved-up", "early"]


def test_high_priority_preempts_lowest_priority_newest_on_one_agent():
    run = [running("low-old", {"a": (0,)}, priority=60, started=1), running("low-new", {"a": (1,)}, priority=60, started=2),
           running("mid", {"a": (2, 3)}, priority=50, started=3)]
    p = plan(pools(), [req("high", 1, priority=10)], run, [agent("a", 4, used=(0, 1, 2, 3))], NOW)
    assert placed(p) == []  # it waits for the slot being freed
    assert [x.allocation_id for x in p.preemptions] == ["low-new"]
    assert "priority 10" in p.preemptions[0].reason


def test_no_preemption_when_disabled_or_not_enough_to_free():
    run = [running("low", {"a": (0, 1)}, priority=60)]
    assert plan(pools(preemption=False), [req("high", 2, priority=10)], run, [agent("a", 2, used=(0, 1))], NOW).preemptions == []
    same = [running("peer", {"a": (0, 1)}, priority=42)]
    assert plan(pools(), [req("x", 2)], same, [agent("a", 2, used=(0, 1))], NOW).preemptions == []


def test_already_preempting_work_counts_as_freed():
    run = [running("going", {"a": (0, 1)}, priority=60, preempting=True), running("other", {"b": (0, 1)}, priority=60)]
    p = plan(pools(), [req("high", 2, priority=10)], run, [agent("a", 2, used=(0, 1)), agent("b", 2, used=(0, 1))], NOW)
    assert p.preemptions == []


def test_backfill_never_delays_the_head():
    # The head needs 4 slots on the 4-slot agent (2 busy); a small job must not take the rest of it,
    # but may use the 1-slot agent the head could never use.
    agents = [agent("big", 4, used=(0, 1)), agent("tiny", 1)]
    run = [running("r", {"big": (0, 1)}, priority=42)]
    pending = [req("head", 4, submitted=1), req("small", 1, submitted=2), req("small2", 1, submitted=3)]
    p = plan(pools(preemption=False), pending, run, agents, NOW)
    assert [(x.allocation_id, x.resources[0][0]) for x in p.placements] == [("small", "tiny")]


def test_max_slots_caps_a_job_without_blocking_others():
    pending = [req("a1", 1, job="A", max_slots=1), req("a2", 1, job="A", max_slots=1, submitted=1),
               req("b1", 1, job="B", submitted=2)]
    assert placed(plan(pools(), pending, [], [agent("x", 4)], NOW)) == ["a1", "b1"]


def test_best_and_worst_fit():
    agents = [agent("roomy", 4), agent("snug", 2, used=(0,))]
    best = plan(pools(fitting_policy="best"), [req("r", 1)], [], agents, NOW)
    worst = plan(pools(fitting_policy="worst"), [req("r", 1)], [], agents, NOW)
    assert best.placements[0].resources[0][0] == "snug"
    assert worst.placements[0].resources[0][0] == "roomy"


def test_unknown_pool_or_impossible_shape_just_waits():
    p = plan(pools(), [req("elsewhere", 1, pool="gpu"), req("huge", 16), req("fits", 1, submitted=1)], [],
             [agent("a", 2)], NOW)
    assert placed(p) == ["fits"]
