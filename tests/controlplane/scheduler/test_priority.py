"""The priority scheduler: order, preemption, backfill without delaying the head."""

from __future__ import annotations

from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req, running


def placed(p) -> list[str]:
    return [x.allocation_id for x in p.placements]


def test_lower_number_runs_first_then_queue_position_then_submission():
    pending = [req("late", 1, submitted=5), req("urgent", 1, priority=10, submitted=9),
               req("early", 1, submitted=1), req("moved-up", 1, submitted=7, position=-1)]
    p = plan(pools(), pending, [], [agent("a", 3)], NOW)
    assert placed(p) == ["urgent", "moved-up", "early"]


def test_high_priority_preempts_lowest_priority_newest_on_one_agent():
    run = [running("low-old", {"a": (0,)}, priority=60, started=1),
           running("low-new", {"a": (1,)}, priority=60, started=2),
           running("mid", {"a": (2, 3)}, priority=50, started=3)]
    p = plan(pools(), [req("high", 1, priority=10)], run, [agent("a", 4, used=(0, 1, 2, 3))], NOW)
    assert placed(p) == []  # it waits for the slot being freed
    assert [x.allocation_id for x in p.preemptions] == ["low-new"]
    assert "priority 10" in p.preemptions[0].reason


def test_no_preemption_when_disabled_or_not_enough_to_free():
    run = [running("low", {"a": (0, 1)}, priority=60)]
    assert plan(pools(preemption=False), [req("high", 2, priority=10)], run, [agent("a", 2, used=(0, 1))],
                NOW).preemptions == []
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


def test_a_free_slot_behind_a_blocked_head_runs_trials_that_the_head_takes_back_when_it_fits():
    # Two 2-slot agents; "long" (ahead in the queue) holds one slot of a, "other" all of b. The 2-slot
    # head cannot start; the 1-slot trials of the same priority behind it used to wait, the slot idle.
    agents = [agent("a", 2, used=(0,)), agent("b", 2, used=(0, 1))]
    run = [running("long", {"a": (0,)}, submitted=0), running("other", {"b": (0, 1)}, submitted=0)]
    pending = [req("head", 2, submitted=1), req("t1", 1, submitted=2), req("t2", 1, submitted=3)]
    p = plan(pools(), pending, run, agents, NOW)
    assert [(x.allocation_id, x.resources) for x in p.placements] == [("t1", (("a", (1,)),))]
    assert p.preemptions == []
    # "long" ends: the head would fit on a but for t1, which is behind it: t1 is preempted (it
    # checkpoints and queues again), a is kept for the head, and t2 does not take a's free slot
    run = [running("t1", {"a": (1,)}, submitted=2), running("other", {"b": (0, 1)}, submitted=0)]
    p = plan(pools(), [req("head", 2, submitted=1), req("t2", 1, submitted=3)], run,
             [agent("a", 2, used=(1,)), agent("b", 2, used=(0, 1))], NOW)
    assert [x.allocation_id for x in p.preemptions] == ["t1"] and p.placements == []
    assert "head" in p.preemptions[0].reason


def test_work_a_blocked_head_could_not_take_back_gets_none_of_its_agents():
    # a notebook (not preemptible) behind the head, then a trial behind the notebook: neither takes
    # the head's agent; without preemption nothing backfills it either
    agents = [agent("a", 2, used=(0,)), agent("tiny", 1)]
    run = [running("long", {"a": (0,)})]
    pending = [req("head", 2, submitted=1), req("notebook", 1, submitted=2, preemptible=False),
               req("trial", 1, submitted=3)]
    assert [(x.allocation_id, x.resources[0][0]) for x in plan(pools(), pending, run, agents, NOW).placements] == [
        ("notebook", "tiny")]
    trials = [req("head", 2, submitted=1), req("t1", 1, submitted=2)]
    assert plan(pools(preemption=False), trials, run, [agent("a", 2, used=(0,))], NOW).placements == []


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


def test_ties_go_by_queue_position_then_submission_then_id():
    pending = [req("c", 1, submitted=1), req("b", 1, submitted=1), req("a", 1, submitted=2),
               req("front", 1, submitted=9, position=-5)]
    assert placed(plan(pools(), pending, [], [agent("x", 3)], NOW)) == ["front", "b", "c"]


def test_same_plan_whatever_the_input_order():
    pending = [req(f"r{i}", 1 + i % 3, priority=40 + i % 4, submitted=i % 5) for i in range(12)]
    agents = [agent(f"a{i}", 4, used=(0,) if i % 2 else ()) for i in range(4)]
    first = plan(pools(), pending, [], agents, NOW)
    again = plan(pools(), list(reversed(pending)), [], list(reversed(agents)), NOW)
    assert first == again


def test_preempts_only_as_much_as_needed_and_only_where_it_helps():
    # Two 2-slot agents. The lowest-priority newest work sits alone on "a"; freeing it is enough.
    run = [running("p80-old", {"b": (0,)}, priority=80, started=1),
           running("p80-new", {"a": (0, 1)}, priority=80, started=5),
           running("p70", {"b": (1,)}, priority=70, started=9)]
    agents = [agent("a", 2, used=(0, 1)), agent("b", 2, used=(0, 1))]
    p = plan(pools(), [req("high", 2, priority=10)], run, agents, NOW)
    assert [x.allocation_id for x in p.preemptions] == ["p80-new"]
    # A 3rd victim order case: newest 1-slot work on b alone is not enough, so the old one goes too,
    # and the useless newest victim elsewhere is spared.
    run = [running("b-old", {"b": (0,)}, priority=80, started=1),
           running("b-new", {"b": (1,)}, priority=80, started=2),
           running("a-newest", {"a": (0,)}, priority=80, started=3),
           running("a-keep", {"a": (1,)}, priority=20, started=0)]
    p = plan(pools(), [req("high", 2, priority=10)], run, agents, NOW)
    assert sorted(x.allocation_id for x in p.preemptions) == ["b-new", "b-old"]


def test_never_preempts_non_preemptible_or_equal_or_higher_priority_work():
    run = [running("notebook", {"a": (0,)}, priority=90, preemptible=False), running("peer", {"a": (1,)}, priority=10)]
    p = plan(pools(), [req("high", 2, priority=10)], run, [agent("a", 2, used=(0, 1))], NOW)
    assert p.preemptions == [] and p.placements == []


def test_a_non_preemptible_request_may_still_preempt_lower_work():
    run = [running("low", {"a": (0,)}, priority=90)]
    p = plan(pools(), [req("shell", 1, priority=10, preemptible=False)], run, [agent("a", 1, used=(0,))], NOW)
    assert [x.allocation_id for x in p.preemptions] == ["low"]


def test_preempting_work_of_any_priority_counts_as_soon_free():
    run = [running("leaving", {"a": (0, 1)}, priority=5, preempting=True), running("low", {"b": (0, 1)}, priority=90)]
    agents = [agent("a", 2, used=(0, 1)), agent("b", 2, used=(0, 1))]
    assert plan(pools(), [req("high", 2, priority=10)], run, agents, NOW).preemptions == []


def test_slots_waited_for_are_reserved_from_lower_priority_backfill():
    # "high" needs the whole 2-slot agent: one slot is free, the other is freed by preemption.
    # The low-priority 1-slot request must not take the free slot meanwhile; it may use "c".
    run = [running("victim", {"a": (1,)}, priority=90)]
    agents = [agent("a", 2, used=(1,)), agent("c", 1)]
    p = plan(pools(), [req("high", 2, priority=10), req("small", 1, priority=50), req("small2", 1, priority=50,
                                                                                    submitted=1)], run, agents, NOW)
    assert [x.allocation_id for x in p.preemptions] == ["victim"]
    assert [(x.allocation_id, x.resources) for x in p.placements] == [("small", (("c", (0,)),))]


def test_each_blocked_head_keeps_its_own_agents():
    # head4 can use only the 4-slot agent, head2 the 2-slot ones; the 1-slot request may take neither.
    agents = [agent("big", 4, used=(0,)), agent("mid", 2, used=(0,)), agent("one", 1, used=(0,))]
    pending = [req("head4", 4, submitted=1), req("head2", 2, submitted=2), req("small", 1, submitted=3)]
    p = plan(pools(preemption=False), pending, [], agents, NOW)
    assert p.placements == []


def test_a_hopeless_small_gang_does_not_stop_a_bigger_one_that_can_preempt():
    # 3 slots: only the 4-slot agent, which holds non-preemptible work on 2 slots: hopeless.
    # 4 slots: two 2-slot agents once their low-priority work is preempted.
    run = [running("pinned", {"big": (0, 1)}, preemptible=False),
           running("low-a", {"a": (0, 1)}, priority=90), running("low-b", {"b": (0, 1)}, priority=90)]
    agents = [agent("big", 4, used=(0, 1)), agent("a", 2, used=(0, 1)), agent("b", 2, used=(0, 1))]
    p = plan(pools(), [req("three", 3, priority=10), req("four", 4, priority=10, submitted=1)], run, agents, NOW)
    assert sorted(x.allocation_id for x in p.preemptions) == ["low-a", "low-b"]


def test_max_slots_counts_running_work_of_the_job():
    run = [running("a0", {"x": (0,)}, job="A")]
    pending = [req("a1", 1, job="A", max_slots=2), req("a2", 1, job="A", max_slots=2, submitted=1)]
    assert placed(plan(pools(), pending, run, [agent("x", 4, used=(0,))], NOW)) == ["a1"]


def test_preemption_scenarios_on_one_agent():
    # (name, policy, running, pending, expected preemptions)
    low = [running("p60-old", {"a": (0, 1)}, priority=60, started=1), running("p60-new", {"a": (2, 3)}, priority=60,
                                                                               started=2)]
    cases = [
        ("enabled: newest lowest goes", pools(), low, [req("hi", 2, priority=10)], ["p60-new"]),
        ("disabled: nothing", pools(preemption=False), low, [req("hi", 2, priority=10)], []),
        ("needs both", pools(), low, [req("hi", 4, priority=10)], ["p60-new", "p60-old"]),
        ("impossible: too big", pools(), low, [req("hi", 5, priority=10)], []),
        ("lower priority waits", pools(), low, [req("lo", 2, priority=70)], []),
        ("two requests do not share a victim", pools(), low,
         [req("hi1", 2, priority=10), req("hi2", 2, priority=10, submitted=1)], ["p60-new", "p60-old"]),
    ]
    for name, policy, run, pending, expected in cases:
        p = plan(policy, pending, run, [agent("a", 4, used=(0, 1, 2, 3))], NOW)
        assert [x.allocation_id for x in p.preemptions] == expected, name
        assert p.placements == [], name


def test_queue_order_decides_preemption_at_equal_priority():
    # One 2-slot agent, full. (name, running, pending, expected preemptions): at equal priority only
    # work queued behind the waiting request gives way, as after `det job update X --ahead-of Y`.
    full = [agent("a", 2, used=(0, 1))]
    y = running("y.1", {"a": (0, 1)}, job="Y", position=10.0)
    cases = [
        ("moved ahead of the running job", [y], [req("x.1", 2, job="X", position=9.5)], ["y.1"]),
        ("queued behind it: waits", [y], [req("x.1", 2, job="X", position=11.0)], []),
        ("same place: waits", [y], [req("x.1", 2, job="X", position=10.0)], []),
        ("same place, submitted later: waits", [running("y.1", {"a": (0, 1)}, job="Y", position=10.0, submitted=1)],
         [req("x.1", 2, job="X", position=10.0, submitted=2)], []),
        ("same place, submitted earlier: preempts",
         [running("y.1", {"a": (0, 1)}, job="Y", position=10.0, submitted=2)],
         [req("x.1", 2, job="X", position=10.0, submitted=1)], ["y.1"]),
        ("its own job never", [running("x.0", {"a": (0, 1)}, job="X", position=10.0)],
         [req("x.1", 2, job="X", position=9.0)], []),
        ("higher priority behind it: kept", [running("y.1", {"a": (0, 1)}, job="Y", priority=10, position=10.0)],
         [req("x.1", 2, job="X", position=9.0)], []),
    ]
    for name, run, pending, expected in cases:
        p = plan(pools(), pending, run, full, NOW)
        assert [x.allocation_id for x in p.preemptions] == expected, name
        assert p.placements == [], name
    assert plan(pools(preemption=False), [req("x.1", 2, job="X", position=9.5)], [y], full, NOW).preemptions == []


def test_the_furthest_back_gives_way_first_and_says_why():
    # Two 1-slot jobs of equal priority run; the request needs one slot: the job last in the queue
    # goes, even though the other started later.
    run = [running("mid.1", {"a": (0,)}, job="MID", position=5.0, started=9.0),
           running("last.1", {"a": (1,)}, job="LAST", position=7.0, started=1.0)]
    p = plan(pools(), [req("first.1", 1, job="FIRST", position=1.0)], run, [agent("a", 2, used=(0, 1))], NOW)
    assert [x.allocation_id for x in p.preemptions] == ["last.1"]
    assert p.preemptions[0].reason == ("preempted by job FIRST, ahead of this work in the queue at the same "
                                       "priority (42)")


def test_lower_priority_still_goes_before_equal_priority_behind():
    run = [running("peer.1", {"a": (0,)}, job="PEER", position=9.0, started=9.0),
           running("low.1", {"a": (1,)}, job="LOW", priority=60, position=0.0, started=1.0)]
    p = plan(pools(), [req("x.1", 1, job="X", position=1.0)], run, [agent("a", 2, used=(0, 1))], NOW)
    assert [x.allocation_id for x in p.preemptions] == ["low.1"]


def test_a_preempted_job_does_not_preempt_back():
    # After X (ahead) took Y's place, Y waits: it is behind X, so X's running work is never its victim.
    run = [running("x.1", {"a": (0, 1)}, job="X", position=9.5)]
    p = plan(pools(), [req("y.2", 2, job="Y", position=10.0)], run, [agent("a", 2, used=(0, 1))], NOW)
    assert p.preemptions == [] and p.placements == []
