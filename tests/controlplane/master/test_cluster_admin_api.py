"""Cluster and admin routes Determined's client calls: resource pools, slots, master config and logs, tokens."""

from __future__ import annotations

import logging

import yaml

from controlplane.master.redaction import MASK
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, JOIN_TOKEN, FakeAgent
from tests.controlplane.master.test_templates_api import admin_headers, new_user

# Every field Determined 0.38.1's v1ResourcePool.from_json requires.
V1_RESOURCE_POOL = {
    "agentDockerImage", "agentDockerNetwork", "agentDockerRuntime", "agentFluentImage", "auxContainerCapacity",
    "auxContainerCapacityPerAgent", "auxContainersRunning", "clusterName", "containerStartupScript",
    "defaultAuxPool", "defaultComputePool", "description", "details", "imageId", "instanceType", "location",
    "masterCertName", "masterUrl", "maxAgentStartingPeriod", "maxAgents", "maxIdleAgentPeriod", "minAgents", "name",
    "numAgents", "preemptible", "resourceManagerMetadata", "schedulerFittingPolicy", "schedulerType", "slotType",
    "slotsAvailable", "slotsUsed", "startupScript", "type"}
ONE_SLOT = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}  # type: ignore[dict-item]


async def test_resource_pools_answer_every_required_field_truthfully(api):
    agent = FakeAgent(api.rt, slots=3)
    await agent.register()
    r = await api.get("/api/v1/resource-pools")
    assert r.status_code == 200, r.text
    [pool] = r.json()["resourcePools"]
    assert V1_RESOURCE_POOL <= pool.keys(), V1_RESOURCE_POOL - pool.keys()
    assert (pool["name"], pool["numAgents"], pool["slotsAvailable"], pool["slotsUsed"]) == ("default", 1, 3, 0)
    assert (pool["type"], pool["schedulerType"], pool["defaultComputePool"]) == (
        "RESOURCE_POOL_TYPE_STATIC", "SCHEDULER_TYPE_PRIORITY", True)
    assert pool["details"] == {"priorityScheduler": {"defaultPriority": 42, "preemption": True}}
    assert pool["auxContainerCapacity"] == pool["auxContainerCapacityPerAgent"] == 100
    assert pool["masterUrl"].startswith("http://") and pool["clusterName"] == "controlplane"
    assert r.json()["pagination"]["total"] == 1


async def test_a_disabled_slot_takes_no_work_and_only_admins_toggle_it(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    admin = await admin_headers(api)
    assert (await api.post("/api/v1/agents/agent-1/slots/0/disable", json={})).status_code == 403
    r = await api.post("/api/v1/agents/agent-1/slots/0/disable", json={}, headers=admin)
    assert r.status_code == 200, r.text
    assert (r.json()["slot"]["id"], r.json()["slot"]["enabled"], r.json()["slot"]["draining"]) == ("0", False, False)
    r = await api.post("/api/v1/agents/agent-1/slots/1/disable", json={"drain": True}, headers=admin)
    assert r.json()["slot"]["draining"] is True
    slots = (await api.get("/api/v1/agents")).json()["agents"][0]["slots"]
    assert [(s["enabled"], s["draining"]) for s in slots.values()] == [(False, False), (False, True)]
    # Both slots off: a one-slot trial waits; enabling slot 1 places it there, never on slot 0.
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(ONE_SLOT), "modelDefinition": []})
    assert r.status_code == 200, r.text
    api.rt.orchestrator.wake()
    assert agent.conn is not None and agent.conn.outbox.empty()
    assert (await api.post("/api/v1/agents/agent-1/slots/1/enable", headers=admin)).status_code == 200
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.slot_ids == [1]
    # Disabling the slot in use without drain preempts its work.
    await agent.start(start)
    r = await api.post("/api/v1/agents/agent-1/slots/1/disable", json={"drain": False}, headers=admin)
    assert r.json()["slot"]["container"]["id"] == start.allocation_id
    preempt = await api.get(f"/api/v1/allocations/{start.allocation_id}/signals/preemption",
                            params={"timeout_seconds": 0},
                            headers={"Grpc-Metadata-x-allocation-token": f"Bearer {start.session_token}"})
    assert preempt.json()["preempt"] is True
    assert (await api.post("/api/v1/agents/agent-1/slots/7/enable", headers=admin)).status_code == 404
    assert (await api.post("/api/v1/agents/nobody/slots/0/enable", headers=admin)).status_code == 404
    r = await api.post("/api/v1/agents/agent-1/slots/0/disable", json={"drain": "yes"}, headers=admin)
    assert r.status_code == 400 and "drain" in r.json()["message"]


async def test_master_config_is_effective_and_redacted_admins_only(api):
    admin = await admin_headers(api)
    assert (await api.get("/api/v1/master/config")).status_code == 403
    api.rt.settings.checkpoint_storage = {"type": "s3", "bucket": "b", "secret_key": "s3cr3t", "access_key": "ak"}
    r = await api.get("/api/v1/master/config", headers=admin)
    assert r.status_code == 200, r.text
    config = r.json()["config"]
    assert config["security"]["join_token"] == MASK
    assert config["checkpoint_storage"] == {"type": "s3", "bucket": "b", "secret_key": MASK, "access_key": MASK}
    assert config["resource_pools"][0]["pool_name"] == "default" and config["agent_reconnect_wait"] == "1s"
    assert JOIN_TOKEN not in r.text and "s3cr3t" not in r.text


async def test_master_logs_are_its_recent_lines_bounded_admins_only(api):
    admin = await admin_headers(api)
    log = logging.getLogger("controlplane.master.test")
    for i in range(5):
        log.warning("line %d of the test", i)
    log.warning("an agent sent %s", JOIN_TOKEN)  # never shown
    assert (await api.get("/api/v1/master/logs")).status_code == 403
    r = await api.get("/api/v1/master/logs", params={"offset": -20}, headers=admin)
    assert r.status_code == 200, r.text
    entries = [e for e in (yaml.safe_load(line)["result"]["logEntry"] for line in r.text.splitlines())
               if e["message"].startswith("controlplane.master.test")]  # the test's own lines among others
    assert [e["message"] for e in entries][3:5] == ["controlplane.master.test: line 3 of the test",
                                                   "controlplane.master.test: line 4 of the test"]
    assert entries[-1]["message"].endswith(MASK) and JOIN_TOKEN not in r.text
    assert entries[0]["level"] == "LOG_LEVEL_WARNING" and entries[0]["id"] < entries[1]["id"]
    r = await api.get("/api/v1/master/logs", params={"limit": 1}, headers=admin)
    assert len(r.text.splitlines()) == 1
    r = await api.get("/api/v1/master/logs", params={"limit": 100000}, headers=admin)
    assert r.status_code == 400 and "limit" in r.json()["message"]


async def test_tokens_list_ones_own_sessions_admins_all_without_secrets(api):
    nora = await new_user(api, "nora", "user")
    admin = await admin_headers(api)
    token = nora["Authorization"].removeprefix("Bearer ")
    r = await api.get("/api/v1/tokens", headers=nora)
    assert r.status_code == 200, r.text
    mine = r.json()["tokenInfo"]
    nora_id = (await api.get("/api/v1/me", headers=nora)).json()["user"]["id"]
    assert mine and {t["userId"] for t in mine} == {nora_id}
    assert mine[0]["tokenType"] == "TOKEN_TYPE_USER_SESSION" and mine[0]["revoked"] is False
    assert token not in r.text
    assert (await api.get("/api/v1/tokens", params={"username": "admin"}, headers=nora)).status_code == 403
    everyone = (await api.get("/api/v1/tokens", headers=admin)).json()["tokenInfo"]
    assert len({t["userId"] for t in everyone}) >= 3
    only = (await api.get("/api/v1/tokens", params={"username": "nora"}, headers=admin)).json()["tokenInfo"]
    assert {t["userId"] for t in only} == {nora_id}
    r = await api.get("/api/v1/tokens", params={"tokenIds": [mine[0]["id"]]}, headers=nora)
    assert [t["id"] for t in r.json()["tokenInfo"]] == [mine[0]["id"]]
