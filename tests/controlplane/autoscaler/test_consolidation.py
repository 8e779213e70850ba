"""Consolidation: which underused instances are drained, where their trials go, and why."""

from __future__ import annotations

from controlplane.autoscaler.model import AgentView, Consolidation, InstanceView, Shape, TaskView
from tests.controlplane.autoscaler.scenarios import MIN, NOW, pool, run

HOUR = 60 * MIN


def instance(iid: str, itype: str = "p4d", age: float = 10 * HOUR) -> InstanceView:
    return InstanceView(iid, "running", NOW - age, "a", itype, False, "", True)


def trial(tid: str, age: float = 5 * HOUR, slots: int = 1, **kw: object) -> TaskView:
    return TaskView(tid, slots, NOW - age, movable=True, **kw)  # type: ignore[arg-type]


def agent(aid: str, slots: int, *tasks: TaskView, **kw: object) -> AgentView:
    used = sum(t.slots for t in tasks)
    return AgentView(aid, None if tasks else NOW - 30, slots, free=slots - used, tasks=tasks, **kw)  # type: ignore[arg-type]


def p4d(**kw: object):
    return pool(shapes=(Shape("p4d", 8, 32.77),), zones=("a",), **kw)


def test_the_least_loaded_instance_is_drained_onto_the_others_free_slots():
    agents = [agent("i-1", 8, trial("t1"), trial("t2"), trial("t3")), agent("i-2", 8, trial("t4"))]
    d = run(p4d(), instances=[instance("i-1"), instance("i-2")], agents=agents)
    assert [(x.instance_id, [(m.task_id, m.to_agent) for m in x.moves]) for x in d.drains] == [("i-2", [("t4", "i-1")])]
    reason = d.drains[0].reason
    assert "i-2 uses 1 of 8 slots" in reason and "t4 → i-1" in reason and "saves $32.77/h" in reason
    assert d.drains[0].expected_saving_usd > 0
    assert not d.launches and not d.terminations


def test_nothing_is_moved_that_cannot_resume_or_has_moved_enough_or_is_young():
    cases = {
        "cannot resume": TaskView("t4", 1, NOW - 5 * HOUR, movable=False),
        "moved twice": trial("t4", moves=2),
        "ran less than min_runtime": trial("t4", age=HOUR),
        "spans agents": trial("t4", spans_agents=True),
    }
    for why, task in cases.items():
        agents = [agent("i-1", 8, trial("t1")), agent("i-2", 8, task)]
        d = run(p4d(), instances=[instance("i-1"), instance("i-2")], agents=agents)
        assert [x.instance_id for x in d.drains] == ["i-1"] or not d.drains, why  # never i-2
        assert all(x.instance_id != "i-2" for x in d.drains), why


def test_no_drain_while_demand_waits_or_below_min_instances_or_when_off():
    agents = [agent("i-1", 8, trial("t1"), trial("t2")), agent("i-2", 8, trial("t3"))]
    instances = [instance("i-1"), instance("i-2")]
    assert run(p4d(), gangs=[8], instances=instances, agents=agents).drains == []
    assert run(p4d(min_instances=2), instances=instances, agents=agents).drains == []
    off = p4d(consolidation=Consolidation(enabled=False))
    assert run(off, instances=instances, agents=agents).drains == []


def test_a_drained_agent_is_terminated_as_soon_as_it_is_empty_and_takes_no_demand():
    drained = AgentView("i-2", NOW - 1, 8, free=8, draining=True, consolidating=True)
    d = run(p4d(), gangs=[1], instances=[instance("i-1"), instance("i-2")],
            agents=[agent("i-1", 8, *(trial(f"t{i}") for i in range(8))), drained])
    assert [t.instance_id for t in d.terminations] == ["i-2"]
    assert "drained by consolidation" in d.terminations[0].reason
    assert sum(x.count for x in d.launches) == 1  # the pending trial needs a new instance, not the drained one


G5 = (Shape("g5.xlarge", 1, 1.006), Shape("g5.12xlarge", 4, 5.672), Shape("g5.48xlarge", 8, 16.288))


def test_a_trial_alone_on_a_big_shape_moves_to_a_cheap_one_launched_first():
    cfg = pool(shapes=G5, zones=("a",))
    big = instance("i-big", "g5.48xlarge")
    alone = agent("i-big", 8, trial("t1", age=10 * MIN))  # young: cheaper shapes need no min_runtime
    d = run(cfg, instances=[big], agents=[alone])
    assert d.drains == []  # make before break: nothing to move onto yet
    assert [(x.instance_type, x.count) for x in d.launches] == [("g5.xlarge", 1)]
    assert "launching those first" in d.launches[0].reason
    # the 1-slot instance is up and idle: now the trial moves onto it
    small = instance("i-small", "g5.xlarge", age=2 * MIN)
    d = run(cfg, instances=[big, small], agents=[alone, agent("i-small", 1)])
    assert [(x.instance_id, [(m.task_id, m.to_agent) for m in x.moves]) for x in d.drains] == \
        [("i-big", [("t1", "i-small")])]
    assert "runs on 1 × g5.xlarge for $1.01/h" in d.drains[0].reason
    assert not d.launches


def test_with_mixed_shapes_a_trial_is_not_parked_on_dear_free_slots():
    # t1 could fit on the 8-slot instance's free slots, but a slot there costs twice a 1-slot
    # instance's: it goes to a cheap shape instead (a launch first), never onto i-big; i-big's two
    # trials are worth moving to cheap shapes too
    cfg = pool(shapes=G5, zones=("a",))
    d = run(cfg, instances=[instance("i-big", "g5.48xlarge"), instance("i-mid", "g5.12xlarge")],
            agents=[agent("i-big", 8, trial("t0"), trial("t2")), agent("i-mid", 4, trial("t1"))])
    assert all(m.to_agent != "i-big" for x in d.drains for m in x.moves)
    assert [(x.instance_type, x.count) for x in d.launches] == [("g5.xlarge", 3)]
    assert d.drains == []


def test_no_trial_is_moved_onto_an_instance_drained_in_the_same_tick():
    # i-big's lone trial goes to an idle cheap agent (a cheaper-shape drain); i-b's 5-slot trial
    # fits only i-big's 7 free slots, which empty out in this very tick: it must stay where it is.
    cfg = pool(shapes=G5, zones=("a",))
    instances = [instance("i-big", "g5.48xlarge"), instance("i-b", "g5.48xlarge"), instance("i-small", "g5.xlarge")]
    agents = [agent("i-big", 8, trial("t1")), agent("i-b", 8, trial("t2", slots=5)), agent("i-small", 1)]
    d = run(cfg, instances=instances, agents=agents)
    drained = {x.instance_id for x in d.drains}
    assert "i-big" in drained
    assert [(x.instance_id, m.task_id, m.to_agent) for x in d.drains for m in x.moves
            if m.to_agent in drained] == []
