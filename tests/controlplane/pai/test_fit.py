"""A job that could never be placed is refused at submit: every reason at once, each by its field path."""

from __future__ import annotations

from typing import Any

from controlplane.pai.fit import Pool, problems
from controlplane.pai.spec import parse_job
from controlplane.scheduler.model import AgentSnapshot


def job(**role: Any) -> Any:
    main = {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true",
            **role}
    return parse_job({"jobName": "j", "image": "default", "taskRoles": [main]})[0]


def agents(n: int, slots: int = 2, cpus: int = 2, hosts: int | None = None) -> list[AgentSnapshot]:
    """``n`` agents, on ``hosts`` hosts (default: one each)."""
    return [AgentSnapshot(f"a{i}", "default", tuple(range(slots)), frozenset(), cpus=cpus,
                          host=f"10.0.0.{i % (hosts or n)}") for i in range(n)]


def pool(agent_list: list[AgentSnapshot], **kw: Any) -> Pool:
    return Pool("default", agent_list, 20000, 31999, **kw)


def messages(found) -> list[str]:
    return [str(e) for e in found]


def test_fixed_ports_outside_the_agents_range_are_refused_without_any_agent():
    found = problems(job(portList=[{"label": "data", "beginAt": 40000, "portNumber": 3}]), pool([]))
    assert messages(found) == ["taskRoles[0].portList[0].beginAt: ports 40000-40002 (data) lie outside the agents' "
                               "port range 20000-31999: no agent can give them"]
    # the end of the range counts too
    found = problems(job(portList=[{"label": "x", "beginAt": 31999, "portNumber": 2}]), pool([]))
    assert [e.path for e in found] == ["taskRoles[0].portList[0].beginAt"]
    assert problems(job(portList=[{"label": "x", "beginAt": 31998, "portNumber": 2}]), pool([])) == []


def test_tasks_wanting_one_fixed_port_need_a_host_each():
    two = job(taskNumber=2, portList=[{"label": "data", "beginAt": 25000, "portNumber": 1}])
    found = problems(two, pool(agents(3, hosts=1)))  # three agents, one host (a local cluster)
    assert messages(found) == ["taskRoles[0].portList[0].beginAt: its 2 tasks all want port 25000, so each needs a "
                               "host of its own, and resource pool 'default' has 1 host"]
    assert problems(two, pool(agents(2, hosts=2))) == []
    assert problems(two, pool(agents(1), grows=True)) == []  # an autoscaled pool brings new hosts


def test_two_roles_whose_fixed_ports_overlap_count_together():
    raw = {"jobName": "j", "image": "default", "taskRoles": [
        {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true",
         "portList": [{"label": "a", "beginAt": 25000, "portNumber": 3}]},
        {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true",
         "portList": [{"label": "b", "beginAt": 25002, "portNumber": 1}]}]}
    found = problems(parse_job(raw)[0], pool(agents(2)))
    assert messages(found) == [
        "taskRoles[1].portList[0].beginAt: the 3 tasks of roles 'ps' and 'worker' all want port 25002, so each "
        "needs a host of its own, and resource pool 'default' has 2 hosts"]


def test_more_gpus_or_cpus_than_any_agent_has_every_problem_at_once():
    big = job(gpuNumber=4, cpuNumber=64, portList=[{"label": "data", "beginAt": 40000, "portNumber": 3}])
    assert messages(problems(big, pool(agents(2)))) == [
        "taskRoles[0].portList[0].beginAt: ports 40000-40002 (data) lie outside the agents' port range 20000-31999: "
        "no agent can give them",
        "taskRoles[0].gpuNumber: each task needs 4 slots, and agents of resource pool 'default' have at most 2",
        "taskRoles[0].cpuNumber: each task needs 64 CPUs, and agents of resource pool 'default' have at most 2",
    ]


def test_cpus_are_judged_only_where_every_agent_reports_them_and_the_pool_does_not_grow():
    many = job(cpuNumber=64)
    assert problems(many, pool(agents(2, cpus=0))) == []  # older agents: not reported
    assert problems(many, pool(agents(2), grows=True)) == []
    assert problems(many, pool(agents(2), books_cpus=False)) == []  # a command books none


def test_roles_that_fit_alone_but_not_together():
    # three tasks of 2 CPUs on two 2-CPU agents: each fits, all three never do
    found = problems(job(taskNumber=3, cpuNumber=2), pool(agents(2)))
    assert messages(found) == ["taskRoles: its tasks need 6 CPUs at once (2, 2, 2), each task on one agent, and the "
                               "agents of resource pool 'default' have 2, 2 CPUs"]
    found = problems(job(taskNumber=3, gpuNumber=2), pool(agents(2)))
    assert [e.path for e in found] == ["taskRoles"]
    assert "a job whose tasks need 2, 2, 2 slots cannot run in pool 'default'" in str(found[0])
