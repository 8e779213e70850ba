"""Determined's commands, shells and notebooks over its paths, with a fake agent: each is a one-task
job of the queue; a command runs its entrypoint, a shell's key reaches only its owner, a notebook
runs JupyterLab under the master's proxy path, and only the owner or an admin kills one."""

from __future__ import annotations

import pytest

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_ownership import add_user


async def test_a_command_runs_its_entrypoint_and_ends_terminated(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": ["echo", "hello world"],
                                                            "description": "say hello"}})
    assert r.status_code == 200, r.text
    cmd = r.json()["command"]
    assert cmd["description"] == "say hello" and cmd["state"] in ("STATE_QUEUED", "STATE_STARTING")
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    assert start.entrypoint[-1] == "echo 'hello world'" and len(start.slot_ids) == 1
    await agent.start(start)
    assert (await api.get(f"/api/v1/commands/{cmd['id']}")).json()["command"]["state"] == "STATE_RUNNING"
    await agent.exit(start.allocation_id, 0)
    done = (await api.get(f"/api/v1/commands/{cmd['id']}")).json()["command"]
    assert done["state"] == "STATE_TERMINATED"
    listed = (await api.get("/api/v1/commands")).json()
    assert [c["id"] for c in listed["commands"]] == [cmd["id"]] and listed["pagination"]["total"] == 1
    assert (await api.get("/api/v1/jobs")).json() == []  # OpenPAI's list holds only OpenPAI jobs


async def test_bad_command_configs_are_400_naming_the_field(api):
    for config, field in (({}, "entrypoint: required"), ({"entrypoint": "x", "resources": {"slots": -1}},
                                                         "resources.slots"),
                          ({"entrypoint": "x", "environment": {"environment_variables": ["no-equals"]}},
                           "environment.environment_variables[0]"),
                          ({"entrypoint": "x", "idle_timeout": "soon"}, "idle_timeout")):
        r = await api.post("/api/v1/commands", json={"config": config})
        assert r.status_code == 400 and field in r.json()["message"], r.text
    assert (await api.get("/api/v1/commands")).json()["commands"] == []


async def test_a_shells_key_reaches_only_its_owner_and_only_the_owner_kills_it(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    shell = (await api.post("/api/v1/shells", json={"config": {}})).json()["shell"]
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.entrypoint[-1] == "exec sleep infinity"
    await agent.start(start)
    mine = (await api.get(f"/api/v1/shells/{shell['id']}")).json()["shell"]
    assert mine["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY") and mine["addresses"][0]["hostPort"] > 0
    assert mine["privateKey"] == start.ssh_key and mine["hostPublicKey"].startswith("ssh-ed25519 ")
    # its own network on its agent, with its SSH port forwarded in: how `det shell open` reaches it
    assert start.network and mine["addresses"][0]["hostPort"] in start.served_ports
    other = await add_user(api, "olga")
    theirs = await api.get(f"/api/v1/shells/{shell['id']}", headers=other)
    assert theirs.status_code == 200 and "privateKey" not in theirs.json()["shell"]
    r = await api.post(f"/api/v1/shells/{shell['id']}/kill", headers=other)
    assert r.status_code == 403 and "owner" in r.json()["message"]
    r = await api.post(f"/api/v1/shells/{shell['id']}/kill")
    assert r.status_code == 200, r.text
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id
    await agent.exit(start.allocation_id, 137)
    assert (await api.get(f"/api/v1/shells/{shell['id']}")).json()["shell"]["state"] == "STATE_TERMINATED"


async def test_a_notebook_runs_jupyterlab_under_its_proxy_path(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    nb = (await api.post("/api/v1/notebooks", json={"config": {"idle_timeout": "5m"}})).json()["notebook"]
    assert nb["serviceAddress"] == f"/proxy/{nb['id']}/lab"
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    assert "jupyterlab" in start.entrypoint[-1] and f"--ServerApp.base_url=/proxy/{nb['id']}/" in start.entrypoint[-1]
    assert (await api.get("/api/v1/notebooks/00000000-0000-0000-0000-000000000000")).status_code == 404


@pytest.mark.parametrize("kind", ["notebook", "tensorboard"])
async def test_a_notebook_or_tensorboard_nobody_uses_past_its_idle_timeout_is_stopped(api, monkeypatch, kind):
    import time

    from controlplane.master.orchestration import pai_jobs

    monkeypatch.setattr(pai_jobs, "IDLE_CHECK_S", 0.0)
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    body: dict = {"config": {"idle_timeout": "10m"}}
    if kind == "tensorboard":
        body["experimentIds"] = [await create_experiment(api)]
        await agent.next_message()  # the experiment's trial takes the slot; the TensorBoard needs none
    nb = (await api.post(f"/api/v1/{kind}s", json=body)).json()[kind]
    start = await agent.next_message()
    await agent.start(start)
    api.rt.proxy.touch(nb["id"], time.monotonic() - 60)  # used a minute ago: kept
    await api.rt.orchestrator.tick()
    assert agent.conn.outbox.empty()
    api.rt.proxy.touch(nb["id"], time.monotonic() - 3600)  # last used an hour ago
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id
    await agent.exit(start.allocation_id, 143)
    done = (await api.get(f"/api/v1/{kind}s/{nb['id']}")).json()[kind]
    assert done["state"] == "STATE_TERMINATED" and "idle_timeout 600s" in done["exitStatus"]
