"""`det resource-pool list`, `det agent enable/disable` and `det experiment set ...` against the fake master."""

from __future__ import annotations

import json

import pytest


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in out.rstrip("\n").splitlines()[2:]]


# ---- resource-pool list ---------------------------------------------------------------------
def test_resource_pool_list_table(fake_master, det):
    r = det("resource-pool", "list")
    assert r.rc == 0, r.err
    assert [c.strip() for c in r.out.splitlines()[0].split("|")] == [
        "Name", "Description", "Scheduler", "Agents", "Slots (used/available)", "Default"]
    assert table_rows(r.out) == [["default", "default pool", "priority", "2", "3/8", "compute, aux"],
                                 ["fair", "fair pool", "fair_share", "1", "0/2", ""]]
    assert len(fake_master.calls("GET", "/api/v1/resource-pools")) == 1


def test_resource_pool_aliases_and_json(fake_master, det):
    r = det("rp", "ls", "--json")
    assert r.rc == 0, r.err
    pools = json.loads(r.out)
    assert [p["name"] for p in pools] == ["default", "fair"]
    assert pools[1]["schedulerType"] == "SCHEDULER_TYPE_FAIR_SHARE"
    assert det("rp", "list").out == det("resource-pool", "ls").out


def test_resource_pool_list_master_error(fake_master, det):
    fake_master.state.failures["/api/v1/resource-pools"] = (500, "pool registry unavailable")
    r = det("resource-pool", "list")
    assert r.rc == 1
    assert r.err.strip() == "Error: pool registry unavailable"
    assert "Traceback" not in r.err


def test_resource_pool_describe_shows_each_instance_type_with_prices_and_count(fake_master, det):
    fake_master.state.autoscaler["gpu"] = {
        "pool": "gpu", "provider": "aws", "autoscaling": True, "minInstances": 0, "maxInstances": 8,
        "spentUsd": 1.5, "burnUsdPerHour": 1.356, "plan": [], "blocked": [], "lastErrors": [], "backoff": None,
        "shapes": [{"instanceType": "g5.xlarge", "slots": 1, "gpuModel": "A10G", "usdPerHour": 1.006,
                    "spotUsdPerHour": 0.35, "count": 2, "spotCount": 1, "configured": True},
                   {"instanceType": "g5.48xlarge", "slots": 8, "gpuModel": "A10G", "usdPerHour": 16.288,
                    "spotUsdPerHour": 0.0, "count": 0, "spotCount": 0, "configured": True},
                   {"instanceType": "x9", "slots": 0, "gpuModel": "", "usdPerHour": 0.0,
                    "spotUsdPerHour": 0.0, "count": 1, "spotCount": 0, "configured": False}],
        "burn": [{"instanceType": "g5.xlarge", "spot": False, "pricePerHour": 1.006, "count": 1},
                 {"instanceType": "g5.xlarge", "spot": True, "pricePerHour": 0.35, "count": 1},
                 {"instanceType": "x9", "spot": False, "pricePerHour": 0.0, "count": 1}],
        "instances": []}
    r = det("resource-pool", "describe", "gpu")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("Type"))
    assert [c.strip() for c in lines[head].split("|")] == ["Type", "Slots", "GPU", "$/h on-demand", "$/h spot",
                                                           "Running"]
    assert table_rows("\n".join(lines[head:head + 5])) == [
        ["g5.xlarge", "1", "A10G", "$1.006", "$0.35", "2 (1 spot)"],
        ["g5.48xlarge", "8", "A10G", "$16.288", "-", "0"],
        ["x9 (not configured)", "-", "-", "-", "-", "1"]]
    assert ("Burning $1.36/h now: 1 × g5.xlarge (on-demand, $1.006/h), 1 × g5.xlarge (spot, $0.35/h), "
            "1 × x9 (on-demand, $0/h)") in r.out, r.out


# ---- agent enable / disable -----------------------------------------------------------------
def test_resource_pool_describe_says_what_the_pool_burns_now(fake_master, det):
    fake_master.state.autoscaler["gpu"] = {
        "pool": "gpu", "provider": "aws", "autoscaling": True, "minInstances": 0, "maxInstances": 8,
        "spentUsd": 12.5, "burnUsdPerHour": 17.294, "plan": [], "blocked": [], "lastErrors": [], "backoff": None,
        "shapes": [{"instanceType": "g5.xlarge", "spot": False, "pricePerHour": 1.006, "count": 1},
                   {"instanceType": "g5.48xlarge", "spot": True, "pricePerHour": 16.288, "count": 1}],
        "instances": []}
    out = det("resource-pool", "describe", "gpu").out
    assert "spent $12.50" in out
    assert ("Burning $17.29/h now: 1 × g5.xlarge (on-demand, $1.006/h), 1 × g5.48xlarge (spot, $16.288/h)"
            in out), out


def test_agent_disable_without_drain(fake_master, det):
    r = det("agent", "disable", "local-agent-0")
    assert r.rc == 0, r.err
    calls = fake_master.calls("POST", "/api/v1/agents/local-agent-0/disable")
    assert [json.loads(c.body) for c in calls] == [{"drain": False}]
    assert r.out.strip() == "Disabled agent local-agent-0 (running work is preempted and moves elsewhere)"
    assert fake_master.state.agent_flags["local-agent-0"] == {"enabled": False, "draining": False}


def test_agent_disable_drain_then_enable(fake_master, det):
    r = det("agent", "disable", "--drain", "local-agent-0")
    assert r.rc == 0, r.err
    assert r.out.strip() == "Disabled agent local-agent-0 (draining: running work finishes)"
    assert json.loads(fake_master.calls("POST", "/api/v1/agents/local-agent-0/disable")[0].body) == {"drain": True}
    assert fake_master.state.agent_flags["local-agent-0"] == {"enabled": False, "draining": True}
    r = det("a", "enable", "local-agent-0")
    assert r.rc == 0, r.err
    assert r.out.strip() == "Enabled agent local-agent-0"
    enable = fake_master.calls("POST", "/api/v1/agents/local-agent-0/enable")
    assert len(enable) == 1 and enable[0].body == b""
    assert fake_master.state.agent_flags["local-agent-0"] == {"enabled": True, "draining": False}


def test_agent_enable_unknown_agent(fake_master, det):
    r = det("agent", "enable", "ghost")
    assert r.rc == 1
    assert r.err.strip() == "Error: agent ghost not found"


# ---- experiment set priority / weight / max-slots -------------------------------------------
def patches(fake_master, exp_id: int) -> list[dict]:
    return [json.loads(c.body) for c in fake_master.calls("PATCH", f"/api/v1/experiments/{exp_id}")]


def test_experiment_set_priority(fake_master, det):
    r = det("experiment", "set", "priority", "2", "10")
    assert r.rc == 0, r.err
    assert patches(fake_master, 2) == [{"id": 2, "resources": {"priority": 10}}]
    assert r.out.strip() == "Set priority of experiment 2 to 10"


def test_experiment_set_max_slots_and_none(fake_master, det):
    r = det("e", "set", "max-slots", "2", "4")
    assert r.rc == 0, r.err
    assert r.out.strip() == "Set max-slots of experiment 2 to 4"
    r = det("e", "set", "max-slots", "2", "none")
    assert r.rc == 0, r.err
    assert r.out.strip() == "Set max-slots of experiment 2 to none"
    assert patches(fake_master, 2) == [{"id": 2, "resources": {"maxSlots": 4}},
                                       {"id": 2, "resources": {"maxSlots": None}}]


def test_experiment_set_weight_on_a_fair_share_experiment(fake_master, det):
    fake_master.state.experiments[2]["resourcePool"] = "fair"
    r = det("e", "set", "weight", "2", "1.5", "--json")
    assert r.rc == 0, r.err
    assert patches(fake_master, 2) == [{"id": 2, "resources": {"weight": 1.5}}]
    assert json.loads(r.out)["id"] == 2


@pytest.mark.parametrize("argv,message", [
    (["priority", "2", "0"], "priority must be an integer from 1 to 99, got '0'"),
    (["priority", "2", "abc"], "priority must be an integer from 1 to 99, got 'abc'"),
    (["weight", "2", "0"], "weight must be a number > 0, got '0'"),
    (["max-slots", "2", "0"], "max-slots must be a positive integer or 'none', got '0'"),
])
def test_experiment_set_client_side_checks(fake_master, det, argv, message):
    r = det("experiment", "set", *argv)
    assert r.rc == 1
    assert r.err.strip() == f"Error: {message}"
    assert fake_master.calls("PATCH") == []


def test_experiment_set_master_rejection(fake_master, det):
    fake_master.state.experiments[2]["resourcePool"] = "fair"
    r = det("experiment", "set", "priority", "2", "3")  # experiment 2 is now in a fair-share pool
    assert r.rc == 1
    assert r.err.strip() == ("Error: resources.priority: priority applies only under the priority scheduler; "
                             "pool 'fair' uses fair_share (set a weight instead)")
    assert "Traceback" not in r.err
    assert r.out == ""


def test_experiment_set_weight_is_stored_under_the_priority_scheduler(fake_master, det):
    r = det("experiment", "set", "weight", "2", "3")  # experiment 2 is in a priority pool: stored, as Determined does
    assert r.rc == 0, r.err
    assert patches(fake_master, 2) == [{"id": 2, "resources": {"weight": 3.0}}]


def test_experiment_set_unknown_experiment(fake_master, det):
    r = det("experiment", "set", "priority", "99", "5")
    assert r.rc == 1
    assert r.err.strip() == "Error: experiment 99 not found"


def test_experiment_set_needs_a_setting(fake_master, det):
    assert det("experiment", "set", "color", "2", "red").rc == 2
    assert det("experiment", "set", "priority", "x", "5").rc == 2
