"""Task groups (OpenPAI jobs): every task placed at once or none, each task on one agent, several
tasks per agent; a group never preempts, and a blocked group holds only the agents it could use."""

from __future__ import annotations

from controlplane.scheduler.gang import group_shape_error
from controlplane.scheduler.model import Plan, PoolPolicy
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, group, pools, req, running


def where(p: Plan) -> dict[str, tuple]:
    return {x.allocation_id: x.resources for x in p.placements}


def slots_used_twice(p: Plan) -> list[tuple[str, int]]:
    seen: set[tuple[str, int]] = set()
    twice = []
    for x in p.placements:
        for agent_id, slots in x.resources:
            for s in slots:
                if (agent_id, s) in seen:
                    twice.append((agent_id, s))
                seen.add((agent_id, s))
    return twice


def test_the_openpai_example_is_placed_all_at_once_without_sharing_a_slot():
    # Two parameter servers and two workers of one slot each, over two 2-slot agents.
    pending = [group("pai", [1, 1, 1, 1])]
    for scheduler in ("priority", "fair_share"):
        p = plan(pools(scheduler=scheduler), pending, [], [agent("a", 2), agent("b", 2)], NOW)
        assert where(p) == {"pai": (("a", (0,)), ("a", (1,)), ("b", (0,)), ("b", (1,)))}, scheduler
        assert slots_used_twice(p) == [] and p.preemptions == []


def test_one_entry_per_task_in_the_order_given_biggest_task_placed_first():
    # Biggest first, each best fit: 3 on the 4-slot agent, 2 on the 2-slot one, then 1 in the slot
    # left on the 4-slot agent. The entries follow the order of the tasks, not of their placing.
    p = plan(pools(), [group("pai", [1, 3, 2])], [], [agent("a", 4), agent("b", 2)], NOW)
    assert where(p) == {"pai": (("a", (3,)), ("a", (0, 1, 2)), ("b", (0, 1)))}


def test_a_group_that_does_not_fit_gets_nothing_and_smaller_work_backfills_only_where_it_could_never_run():
    # The group needs both 2-slot agents (2 + 2); one is half busy. It must not be placed in part,
    # and the 1-slot requests behind it may only use the 1-slot agent it could never use.
    agents = [agent("a", 2, used=(0,)), agent("b", 2), agent("tiny", 1)]
    run = [running("busy", {"a": (0,)}, priority=90)]
    pending = [group("pai", [2, 2], priority=10), req("small", 1, submitted=1), req("small2", 1, submitted=2)]
    p = plan(pools(), pending, run, agents, NOW)
    assert where(p) == {"small": (("tiny", (0,)),)}
    assert p.preemptions == []


def test_a_blocked_group_holds_only_agents_big_enough_for_its_smallest_task():
    # Smallest slotted task: 2 slots. The 1-slot agent stays open to backfill, the 2-slot ones do not.
    agents = [agent("a", 2, used=(0, 1)), agent("b", 2, used=(0,)), agent("c", 1)]
    pending = [group("pai", [2, 2, 0]), req("small", 1, submitted=1)]
    p = plan(pools(preemption=False), pending, [], agents, NOW)
    assert where(p) == {"small": (("c", (0,)),)}


def test_zero_slot_tasks_spread_over_the_agents():
    p = plan(pools(), [group("cpu", [0, 0, 0])], [], [agent("b", 1), agent("a", 1)], NOW)
    assert where(p) == {"cpu": (("a", ()), ("b", ()), ("a", ()))}
    # With a slotted task: it goes first (best fit: "a"); the zero-slot tasks then go to the agent
    # holding fewest tasks of the group, ties by id.
    p = plan(pools(), [group("mixed", [0, 2, 0])], [], [agent("a", 2), agent("b", 2)], NOW)
    assert where(p) == {"mixed": (("b", ()), ("a", (0, 1)), ("a", ()))}


def test_a_group_of_zero_slot_tasks_is_placed_whole_under_the_zero_slot_cap():
    # One placement naming an agent per task; each task counts toward the pool's per-agent cap on
    # zero-slot tasks, as a single CPU task does: all of them fit, or none is placed.
    policy = {"default": PoolPolicy("default", max_zero_slot_per_agent=2)}
    p = plan(policy, [group("cpu", [0, 0])], [], [agent("a", 1)], NOW)
    assert where(p) == {"cpu": (("a", ()), ("a", ()))}
    p = plan(policy, [group("cpu", [0, 0, 0]), req("tb", 0)], [], [agent("a", 1)], NOW)
    assert where(p) == {"tb": (("a", ()),)}  # three do not fit under the cap: the group waits whole


def test_a_group_of_zero_slot_tasks_is_not_held_up_by_a_queued_gang():
    # A TensorBoard (one zero-slot task) while the head of the queue waits for slots it cannot get.
    busy = [running("trial", {"a": (0,)}, job="EXP")]
    full = [agent("a", 1, used=(0,))]
    for scheduler in ("priority", "fair_share"):
        p = plan(pools(scheduler=scheduler), [req("next-trial", 1, job="EXP", priority=1),
                                              group("tb", [0], job="TB", priority=90)], busy, full, NOW)
        assert where(p) == {"tb": (("a", ()),)}, scheduler


def test_a_group_never_causes_a_preemption():
    # Lower-priority work, over its fair share, fills the pool: the group, within its share, waits.
    run = [running(f"low{i}", {"a": (i,)}, job="LOW", priority=90, started=i) for i in range(4)]
    full = [agent("a", 4, used=(0, 1, 2, 3))]
    for scheduler in ("priority", "fair_share"):
        p = plan(pools(scheduler=scheduler), [group("pai", [1, 1], job="PAI", priority=1)], run, full, NOW)
        assert p.preemptions == [] and p.placements == [], scheduler
        # A single request in its place would have preempted: the rule is the group's, not the setup's.
        single = plan(pools(scheduler=scheduler), [req("one", 2, job="ONE", priority=1)], run, full, NOW)
        assert len(single.preemptions) == 2, scheduler


def test_fair_share_places_a_group_within_its_share():
    pending = [group("A-pai", [2, 1, 1], job="A")] + [req(f"B-{i}", 1, job="B", submitted=i) for i in range(6)]
    p = plan(pools(scheduler="fair_share"), pending, [], [agent("a", 4), agent("b", 4)], NOW)
    placed = where(p)
    assert placed["A-pai"] == (("a", (0, 1)), ("a", (2,)), ("a", (3,)))
    assert sorted(k for k in placed if k.startswith("B-")) == ["B-0", "B-1", "B-2", "B-3"]
    assert slots_used_twice(p) == []


def test_fair_share_does_not_place_a_group_beyond_its_share():
    # Two jobs, 4 slots: A holds 1 and its share is 2, so its 2-slot group waits while B's work runs.
    pending = [group("A-pai", [1, 1], job="A"), req("A-1", 1, job="A", submitted=1)]
    pending += [req(f"B-{i}", 1, job="B", submitted=i) for i in range(4)]
    run = [running("A-0", {"a": (0,)}, job="A")]
    p = plan(pools(scheduler="fair_share"), pending, run, [agent("a", 4, used=(0,))], NOW)
    assert sorted(where(p)) == ["A-1", "B-0", "B-1"] and p.preemptions == []


def test_two_groups_sharing_an_agent_never_get_the_same_slot():
    pending = [group("g1", [1, 1]), group("g2", [1, 1], submitted=1), req("after", 1, submitted=2)]
    p = plan(pools(), pending, [], [agent("a", 4), agent("b", 4)], NOW)
    assert where(p) == {"g1": (("a", (0,)), ("a", (1,))), "g2": (("a", (2,)), ("a", (3,))),
                        "after": (("b", (0,)),)}


def test_best_fit_packs_and_worst_fit_spreads_a_group():
    agents = [agent("a", 4, used=(0, 1)), agent("b", 4)]
    best = plan(pools(fitting_policy="best"), [group("g", [1, 1])], [], agents, NOW)
    worst = plan(pools(fitting_policy="worst"), [group("g", [1, 1])], [], agents, NOW)
    assert where(best) == {"g": (("a", (2,)), ("a", (3,)))}
    assert where(worst) == {"g": (("b", (0,)), ("b", (1,)))}


def test_max_slots_counts_the_whole_group():
    pending = [group("pai", [1, 1, 1], job="A", max_slots=2), req("b", 1, job="B", submitted=1)]
    p = plan(pools(), pending, [], [agent("a", 4)], NOW)
    assert where(p) == {"b": (("a", (0,)),)}


def test_a_group_with_a_task_bigger_than_any_agent_waits_without_blocking_the_queue():
    pending = [group("huge", [3, 1], priority=1), req("small", 2, submitted=1)]
    for scheduler in ("priority", "fair_share"):
        p = plan(pools(scheduler=scheduler), pending, [], [agent("a", 2), agent("b", 2)], NOW)
        assert where(p) == {"small": (("a", (0, 1)),)}, scheduler


def test_a_group_needing_more_slots_than_the_pool_has_waits_without_blocking():
    pending = [group("huge", [2, 2, 2], priority=1), req("small", 1, submitted=1)]
    p = plan(pools(), pending, [], [agent("a", 2), agent("b", 2)], NOW)
    assert where(p) == {"small": (("a", (0,)),)}


def test_same_inputs_same_plan():
    agents = [agent(f"a{i}", 4, used=(0,) if i % 2 else ()) for i in range(4)] + [agent("one", 1)]
    pending = [group(f"g{i}", [i % 3, 1, 2 - i % 2, 0], job=f"J{i % 3}", priority=40 + i % 3, submitted=i)
               for i in range(6)] + [req(f"r{i}", 1 + i % 2, job=f"J{i % 3}", submitted=i) for i in range(6)]
    run = [running("low", {"a1": (0,)}, job="L", priority=90), running("low3", {"a3": (0,)}, job="L", priority=90)]
    for scheduler in ("priority", "fair_share"):
        first = plan(pools(scheduler=scheduler), pending, run, agents, NOW)
        again = plan(pools(scheduler=scheduler), list(reversed(pending)), list(reversed(run)),
                     list(reversed(agents)), NOW)
        assert first == again and first.placements, scheduler
        assert slots_used_twice(first) == []


def test_group_shape_errors_name_what_cannot_fit():
    agents = [agent("a", 2), agent("b", 2, used=(0, 1))]  # busy or not, every agent counts
    assert group_shape_error([1, 1, 1, 1], agents) is None
    assert group_shape_error([2, 0, 2], agents) is None
    assert group_shape_error([], agents) is None and group_shape_error([5], []) is None
    assert group_shape_error([3, 1, 1], agents) == (
        "a job whose tasks need 3, 1, 1 slots cannot run in pool 'default': agents have 2 slots each; each task "
        "must fit on one agent")
    assert group_shape_error([2, 2, 2], agents, "gpu") == (
        "a job whose tasks need 2, 2, 2 slots cannot run in pool 'gpu': it needs 6 slots at once and the pool has "
        "4 (agents have 2 slots each)")
    mixed = [agent("a", 4), agent("b", 2)]
    assert group_shape_error([3, 3], mixed) == (
        "a job whose tasks need 3, 3 slots cannot run in pool 'default': agents have 2 slots (1 agent), 4 slots "
        "(1 agent), and its tasks do not fit on them all at once, each task on one agent")
    long = group_shape_error([1] * 9 + [3], [agent("a", 2)] * 5)
    assert long is not None and "tasks need 3, 1 (x9) slots" in long


def test_zero_slot_tasks_of_a_group_leave_agents_idle_for_a_gang_after_it():
    # The CPU-only group takes no slot: the 4-slot gang behind it still gets two whole idle agents,
    # each once.
    pending = [group("cpu", [0]), req("gang", 4, submitted=1)]
    p = plan(pools(), pending, [], [agent("a", 2), agent("b", 2)], NOW)
    assert where(p) == {"cpu": (("a", ()),), "gang": (("a", (0, 1)), ("b", (0, 1)))}
