"""Ports as the frameworklauncher assigns them (static ranges exactly, dynamic lowest-first), booked
per agent across its tasks; a clear error when they cannot be."""

from __future__ import annotations

import pytest

from controlplane.pai.ports import AgentPorts, PortError, assign_ports
from controlplane.pai.spec import parse_job
from tests.controlplane.pai.guide_example import example


def job_with(ports_ps=None, ports_worker=None):
    raw = example()
    if ports_ps is not None:
        raw["taskRoles"][0]["portList"] = ports_ps
    if ports_worker is not None:
        raw["taskRoles"][1]["portList"] = ports_worker
    return parse_job(raw)[0]


ALL_ON_A = {("ps_server", 0): "a", ("ps_server", 1): "a", ("worker", 0): "a", ("worker", 1): "a"}


def test_the_guides_example_on_two_agents():
    placement = {("ps_server", 0): "a", ("ps_server", 1): "b", ("worker", 0): "a", ("worker", 1): "b"}
    agents = {"a": AgentPorts(20000, 20010), "b": AgentPorts(20000, 20010, frozenset({20000}))}
    got = assign_ports(job_with(), placement, agents)
    assert got == {
        ("ps_server", 0): {"http": (20000,), "ssh": (20001,)},
        ("ps_server", 1): {"http": (20001,), "ssh": (20002,)},
        ("worker", 0): {"http": (20002,), "ssh": (20003,)},
        ("worker", 1): {"http": (20003,), "ssh": (20004,)},
    }


def test_static_ports_are_taken_exactly_and_dynamic_ones_avoid_them():
    job = job_with(ports_ps=[{"label": "grpc", "beginAt": 0, "portNumber": 3},
                             {"label": "http", "beginAt": 20001, "portNumber": 2}])
    placement = {("ps_server", 0): "a", ("ps_server", 1): "b", ("worker", 0): "c", ("worker", 1): "c"}
    agents = {k: AgentPorts(20000, 20100) for k in "abc"}
    got = assign_ports(job, placement, agents)
    # declared order kept; ssh (the rest-server's default) added after
    assert list(got[("ps_server", 0)]) == ["grpc", "http", "ssh"]
    assert got[("ps_server", 0)] == {"grpc": (20000, 20003, 20004), "http": (20001, 20002), "ssh": (20005,)}


def test_no_port_is_given_twice_on_one_agent():
    job = job_with(ports_ps=[{"label": "data", "beginAt": 0, "portNumber": 5}],
                   ports_worker=[{"label": "data", "beginAt": 0, "portNumber": 5}])
    used = frozenset({20003, 20010})
    got = assign_ports(job, ALL_ON_A, {"a": AgentPorts(20000, 20100, used)})
    ports = [p for task in got.values() for label in task.values() for p in label]
    assert len(ports) == len(set(ports)) == 4 * 7
    assert not used & set(ports)
    assert all(20000 <= p <= 20100 for p in ports)


def test_a_static_port_already_in_use_is_an_error():
    job = job_with(ports_ps=[{"label": "http", "beginAt": 20005, "portNumber": 2}])
    with pytest.raises(PortError, match=r"ps_server\[0\] on agent a: port type 'http' wants 20005-20006, "
                                        r"but 20006 already in use on the agent"):
        assign_ports(job, ALL_ON_A, {"a": AgentPorts(20000, 20100, frozenset({20006}))})


def test_two_tasks_with_the_same_static_ports_cannot_share_an_agent():
    job = job_with(ports_ps=[{"label": "http", "beginAt": 20005, "portNumber": 1}])
    with pytest.raises(PortError) as info:
        assign_ports(job, ALL_ON_A, {"a": AgentPorts(20000, 20100)})
    assert info.value.task == ("ps_server", 1) and info.value.agent == "a"
    assert "20005 already in use" in str(info.value)


def test_static_ports_outside_the_agents_range_are_an_error():
    job = job_with(ports_ps=[{"label": "http", "beginAt": 80, "portNumber": 1}])
    with pytest.raises(PortError, match="wants 80-80, outside the agent's range 20000-20100"):
        assign_ports(job, ALL_ON_A, {"a": AgentPorts(20000, 20100)})


def test_running_out_of_ports_is_an_error_naming_the_task():
    with pytest.raises(PortError, match=r"worker\[1\] on agent a: port type 'ssh' needs 1 free port\(s\); "
                                        r"the agent's range 20000-20006 has too few left"):
        assign_ports(job_with(), ALL_ON_A, {"a": AgentPorts(20000, 20006)})


def test_missing_placement_or_agent_is_refused():
    with pytest.raises(ValueError, match=r"worker\[1\] has no agent in the placement"):
        assign_ports(job_with(), {k: v for k, v in ALL_ON_A.items() if k != ("worker", 1)},
                     {"a": AgentPorts(20000, 20100)})
    with pytest.raises(PortError, match="unknown agent"):
        assign_ports(job_with(), ALL_ON_A, {"b": AgentPorts(20000, 20100)})


def test_many_tasks_on_a_wide_range_stay_fast():
    raw = example()
    raw["taskRoles"] = [dict(raw["taskRoles"][0], taskNumber=1000,
                             portList=[{"label": "x", "beginAt": 0, "portNumber": 60}])]
    job = parse_job(raw)[0]
    got = assign_ports(job, {("ps_server", i): "a" for i in range(1000)}, {"a": AgentPorts(1024, 65535)})
    assert got[("ps_server", 999)]["ssh"] == (1024 + 62 * 1000 - 1,)


def test_dynamic_ports_start_at_the_agents_start_and_wrap_around_the_range():
    # Another master's tasks on the same host hold ports this master cannot see: the master starts
    # each job's scan at a hashed offset, so the scan begins there and wraps past the top.
    agents = {"a": AgentPorts(20000, 20010, frozenset({20009}), start=20008)}
    got = assign_ports(job_with(), ALL_ON_A, agents)
    assert got == {
        ("ps_server", 0): {"http": (20008,), "ssh": (20010,)},
        ("ps_server", 1): {"http": (20000,), "ssh": (20001,)},
        ("worker", 0): {"http": (20002,), "ssh": (20003,)},
        ("worker", 1): {"http": (20004,), "ssh": (20005,)},
    }


def test_a_wrapped_scan_still_runs_out_after_one_round():
    agents = {"a": AgentPorts(20000, 20006, start=20004)}
    with pytest.raises(PortError, match=r"worker\[1\] on agent a: port type 'ssh' needs 1 free port"):
        assign_ports(job_with(), ALL_ON_A, agents)
