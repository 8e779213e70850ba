"""A task group's CPUs (an OpenPAI role's cpuNumber) and fixed ports are booked like slots, and every
request the planner leaves pending gets a reason saying why."""

from __future__ import annotations

from dataclasses import replace

from controlplane.scheduler.model import PoolPolicy
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, group, pools, req, running


def where(p) -> dict[str, tuple]:
    return {x.allocation_id: x.resources for x in p.placements}


def cpu_group(alloc: str, tasks: list[int], cpus: list[int], **kw):
    return replace(group(alloc, tasks, **kw), task_cpus=tuple(cpus))


def port_group(alloc: str, tasks: list[int], ports: list[set[int]], **kw):
    return replace(group(alloc, tasks, **kw), task_ports=tuple(frozenset(p) for p in ports))


def test_a_task_goes_only_where_its_cpus_are_free():
    # Best fit on slots would put the 1-slot task on "a" (1 slot free), but "a" has 1 CPU and it needs 2.
    agents = [replace(agent("a", 2, used=(0,)), cpus=1), replace(agent("b", 2), cpus=4)]
    p = plan(pools(), [cpu_group("pai", [1], [2])], [], agents, NOW)
    assert where(p) == {"pai": (("b", (0,)),)}


def test_cpus_booked_by_running_tasks_and_by_this_pass_are_not_booked_twice():
    # 4 CPUs, 1 booked by a running task: two zero-slot tasks of 2 CPUs do not fit together, one does.
    agents = [replace(agent("a", 1), cpus=4, used_cpus=1)]
    p = plan(pools(), [cpu_group("two", [0, 0], [2, 2]), cpu_group("one", [0], [2], submitted=1)], [], agents, NOW)
    assert where(p) == {"one": (("a", ()),)}
    assert p.waiting["two"] == ("waiting for CPUs: its tasks need 2, 2 CPUs, and agents of resource pool "
                                "'default' have at most 1 free on one agent")
    # A slotted group placed in the same pass books its CPUs before the zero-slot pass runs.
    agents = [replace(agent("a", 2), cpus=2)]
    p = plan(pools(), [cpu_group("gpu", [1], [2]), cpu_group("cpu", [0], [1], submitted=1)], [], agents, NOW)
    assert where(p) == {"gpu": (("a", (0,)),)}
    assert "waiting for CPUs" in p.waiting["cpu"]


def test_agents_that_report_no_cpus_and_work_that_asks_for_none_are_placed_as_before():
    agents = [agent("a", 2), agent("b", 2)]  # cpus 0: not reported
    p = plan(pools(), [cpu_group("pai", [1, 1, 0, 0], [64, 64, 64, 64])], [], agents, NOW)
    assert where(p) == {"pai": (("a", (0,)), ("a", (1,)), ("b", ()), ("b", ()))}
    # the same group without CPUs, on agents that report theirs: the same placement
    agents = [replace(agent("a", 2), cpus=1), replace(agent("b", 2), cpus=1)]
    p = plan(pools(), [group("pai", [1, 1, 0, 0])], [], agents, NOW)
    assert where(p) == {"pai": (("a", (0,)), ("a", (1,)), ("b", ()), ("b", ()))}


def test_tasks_wanting_one_fixed_port_go_to_different_hosts_and_avoid_a_host_holding_it():
    agents = [replace(agent("a1", 2), host="10.0.0.1"), replace(agent("a2", 2), host="10.0.0.1"),
              replace(agent("b", 2), host="10.0.0.2"),
              replace(agent("c", 2), host="10.0.0.3", used_ports=frozenset({25000}))]
    p = plan(pools(), [port_group("pai", [1, 1], [{25000}, {25000}])], [], agents, NOW)
    assert sorted(a for a, _ in where(p)["pai"]) == ["a1", "b"]  # one per host, never host c
    # a third task has no host left: the group waits whole, and says why
    p = plan(pools(), [port_group("pai", [1, 1, 1], [{25000}] * 3)], [], agents, NOW)
    assert where(p) == {}
    assert p.waiting["pai"] == ("waiting for ports: ports 25000 are held by other work on the hosts of resource "
                                "pool 'default' that could take its tasks")
    one_host = [replace(agent("a1", 2), host="h"), replace(agent("a2", 2), host="h")]
    p = plan(pools(), [port_group("pai", [0, 0], [{25000, 25001}, {25001}])], [], one_host, NOW)
    assert p.waiting["pai"] == ("its tasks' fixed ports (25000-25001) can never all be met: tasks wanting the same "
                                "port need hosts of their own, and resource pool 'default' has 1 host")


def test_every_request_left_pending_says_why():
    agents = [agent("a", 2, used=(0,)), replace(agent("b", 2, used=(0, 1)), cpus=2)]
    run = [running("busy", {"a": (0,), "b": (0, 1)}, priority=10)]
    pending = [req("two", 2, priority=20), req("capped", 1, max_slots=1, job="busy"),
               req("huge", 8), req("elsewhere", 1, pool="gpu"), req("env", 1, env="tf")]
    p = plan({**pools(), "gpu": PoolPolicy("gpu")}, pending, run, agents, NOW)
    assert where(p) == {}
    assert p.waiting == {
        "two": "waiting for 2 slots: resource pool 'default' has 1 free of 4 slots",
        "capped": "its job holds 3 slots of its max_slots 1; this needs 1 more",
        "huge": ("a trial needing 8 slots cannot run in pool 'default': agents have 2 slots each; a gang fits on one "
                 "agent (up to 2 slots) or across idle agents of equal size in multiples of 2 (2, 4)"),
        "elsewhere": "no agent of resource pool 'gpu' is connected",
        "env": "no connected agent of resource pool 'default' offers the environment 'tf'",
    }
    p = plan(pools(), [cpu_group("pai", [0], [64])], [], [replace(a, cpus=2) for a in agents], NOW)
    assert p.waiting == {"pai": "a task needs 64 CPUs: agents of resource pool 'default' have at most 2"}


def test_a_request_that_preempts_says_it_waits_for_the_work_it_preempts():
    run = [running("low", {"a": (0, 1)}, job="job-low", priority=90)]
    p = plan(pools(), [req("high", 2, priority=10)], run, [agent("a", 2, used=(0, 1))], NOW)
    assert [x.allocation_id for x in p.preemptions] == ["low"]
    assert p.waiting == {"high": "waiting for 2 slots: preempting 1 allocation of job job-low to make room"}
    # a blocked request behind the head: its slots exist, but the head holds them
    p = plan(pools(preemption=False), [req("head", 2, priority=10), req("next", 1, priority=20)],
             [running("r", {"a": (0,)})], [agent("a", 2, used=(0,))], NOW)
    assert p.waiting["next"] == ("waiting behind work ahead of it in the queue: resource pool 'default' has 1 free "
                                 "of 2 slots")
