"""OpenPAI jobs through the master's REST routes, with fake agents playing the agents' part: the
whole gang placed at once, the guide's PAI_* environment, the frameworklauncher's completion
policy and retryCount, stop, ownership, and validation errors naming field and rule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # job names unique per user (a constraint); the job JSON stored


def job(name: str = "tf-dist", retry: int = 0, **changes: Any) -> dict[str, Any]:
    """The guide's ps/worker shape: ps tasks need no slot, each worker one."""
    ports = [{"label": "http", "beginAt": 0, "portNumber": 1}, {"label": "ssh", "beginAt": 0, "portNumber": 1}]
    out = {
        "jobName": name, "image": "default", "virtualCluster": "default", "retryCount": retry,
        "taskRoles": [
            {"name": "ps_server", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0,
             "portList": ports, "command": "sleep 60"},
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 1,
             "portList": ports, "command": "echo $PAI_TASK_ROLE_ps_server_HOST_LIST",
             "minSucceededTaskCount": 2},
        ],
        "jobEnvs": {"batch_size": 32},
    }
    out.update(changes)
    return out


async def submit(api, body: dict[str, Any], user: str = "determined") -> Any:
    return await api.post(f"/api/v1/user/{user}/jobs", json=body)


async def starts(agents: list[FakeAgent], count: int) -> dict[str, tuple[FakeAgent, wire.StartTask]]:
    """The next ``count`` StartTask messages, by allocation id."""
    got: dict[str, tuple[FakeAgent, wire.StartTask]] = {}
    while len(got) < count:
        for agent in agents:
            if agent.conn is not None and not agent.conn.outbox.empty():
                msg = await agent.next_message()
                if isinstance(msg, wire.StartTask):
                    got[msg.allocation_id] = (agent, msg)
        if len(got) < count:
            agents[0].rt.orchestrator.wake()
            await asyncio.sleep(0.05)
    return got


async def state(api, name: str = "tf-dist") -> dict[str, Any]:
    r = await api.get(f"/api/v1/user/determined/jobs/{name}")
    assert r.status_code == 200, r.text
    return r.json()


async def two_agents(api) -> list[FakeAgent]:
    agents = [FakeAgent(api.rt, "agent-1", slots=2), FakeAgent(api.rt, "agent-2", slots=2)]
    for a in agents:
        await a.register()
    return agents


async def test_the_guides_job_starts_whole_with_its_pai_environment_and_succeeds_when_both_workers_do(api):
    agents = await two_agents(api)
    r = await submit(api, job())
    assert r.status_code == 202, r.text
    assert r.json()["message"] == "update job tf-dist successfully"
    started = await starts(agents, 4)
    by_task = {(m.env["PAI_CURRENT_TASK_ROLE_NAME"], int(m.env["PAI_TASK_INDEX"])): (a, m)
               for a, m in started.values()}
    assert set(by_task) == {("ps_server", 0), ("ps_server", 1), ("worker", 0), ("worker", 1)}
    _, w0 = by_task[("worker", 0)]
    env = w0.env
    assert w0.entrypoint == ["python3", "-m", "controlplane.exec.pai_task", "--",
                             "echo $PAI_TASK_ROLE_ps_server_HOST_LIST"]
    assert w0.ssh_key.startswith("-----BEGIN OPENSSH PRIVATE KEY") and w0.ssh_host_key != w0.ssh_key
    assert len(w0.slot_ids) == 1 and by_task[("ps_server", 0)][1].slot_ids == []
    assert env["PAI_JOB_NAME"] == "tf-dist" and env["PAI_USER_NAME"] == "determined"
    assert env["PAI_TASK_ROLE_LIST"] == "ps_server,worker" and env["batch_size"] == "32"
    # ip:port of each task's first http port, by task index; every task sees the same list
    hosts = env["PAI_TASK_ROLE_ps_server_HOST_LIST"].split(",")
    assert len(hosts) == 2 and all(h.count(":") == 1 and h.split(":")[1].isdigit() for h in hosts)
    assert all(m.env["PAI_TASK_ROLE_ps_server_HOST_LIST"] == env["PAI_TASK_ROLE_ps_server_HOST_LIST"]
               for _, m in started.values())
    http, ssh = env["PAI_worker_0_http_PORT"], env["PAI_worker_0_ssh_PORT"]
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == f"http:{http};ssh:{ssh}"
    # no two tasks on one address share a port
    booked = [(m.container_addrs[0], p) for _, m in started.values()
              for p in m.env["PAI_CONTAINER_HOST_PORT_LIST"].replace("http:", "").replace("ssh:", "").split(";")]
    assert len(booked) == len(set(booked)) == 8
    # spread over two agents: the hosts' network; the agent forwards each task's booked ports
    assert all(m.network == "" and sorted(m.served_ports) == sorted(
        int(p) for p in m.env["PAI_CONTAINER_HOST_PORT_LIST"].replace("http:", "").replace("ssh:", "").split(";"))
        for _, m in started.values())
    assert (await state(api))["jobStatus"]["state"] == "RUNNING"

    for a, m in started.values():
        await a.start(m)
    for key in (("worker", 0), ("worker", 1)):
        a, m = by_task[key]
        await a.exit(m.allocation_id, 0)
    detail = await state(api)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert "MinSucceededTaskCount 2" in detail["jobStatus"]["appExitDiagnostics"]
    assert [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]] == ["SUCCEEDED", "SUCCEEDED"]
    # the ps tasks are stopped
    kills = set()
    for a in agents:
        while not a.conn.outbox.empty():
            msg = await a.next_message()
            if isinstance(msg, wire.KillTask):
                kills.add(msg.allocation_id)
    assert kills == {by_task[("ps_server", i)][1].allocation_id for i in (0, 1)}
    for i in (0, 1):  # killed for the decision: stopped, not failed, and the job stays SUCCEEDED
        a, m = by_task[("ps_server", i)]
        await a.exit(m.allocation_id, 137)
    detail = await state(api)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert [t["taskState"] for t in detail["taskRoles"]["ps_server"]["taskStatuses"]] == ["STOPPED", "STOPPED"]


async def test_a_job_waits_until_every_task_fits_then_starts_all_at_once(api):
    agent = FakeAgent(api.rt, "agent-1", slots=2)
    await agent.register()
    one_trial = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}
    await create_experiment(api, one_trial)
    trial = await agent.next_message()
    assert isinstance(trial, wire.StartTask)
    await agent.start(trial)
    assert (await submit(api, job())).status_code == 202  # its two workers need both slots
    await api.rt.orchestrator.tick()
    assert agent.conn.outbox.empty()  # one worker would fit: nothing is started
    assert (await state(api))["jobStatus"]["state"] == "WAITING"
    await agent.exit(trial.allocation_id, 0)
    assert len(await starts([agent], 4)) == 4
    assert (await state(api))["jobStatus"]["state"] == "RUNNING"


async def test_a_failed_attempt_is_retried_whole_and_the_old_attempts_token_is_refused(api):
    agents = await two_agents(api)
    assert (await submit(api, job(retry=1))).status_code == 202
    first = await starts(agents, 4)
    for a, m in first.values():
        await a.start(m)
    a, m = next((a, m) for a, m in first.values() if m.env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker")
    await a.exit(m.allocation_id, 3)
    detail = await state(api)
    assert detail["jobStatus"]["state"] == "WAITING" and detail["jobStatus"]["retries"] == 1
    for a2, m2 in first.values():  # the others were stopped; they exit
        if m2.allocation_id != m.allocation_id:
            await a2.exit(m2.allocation_id, 137)
    second = await starts(agents, 4)
    assert all(alloc.endswith(".2") for alloc in second)
    old = await api.get("/api/v1/tasks/" + m.task_id + "/context_directory",
                        headers={"grpc-metadata-x-allocation-token": f"Bearer {m.session_token}"})
    assert old.status_code == 401
    new = next(iter(second.values()))[1]
    ok = await api.get(f"/api/v1/tasks/{new.task_id}/context_directory",
                       headers={"grpc-metadata-x-allocation-token": f"Bearer {new.session_token}"})
    assert ok.status_code == 200, ok.text
    for a, m in second.values():
        await a.start(m)
    a, m = next((a, m) for a, m in second.values() if m.env["PAI_CURRENT_TASK_ROLE_NAME"] == "ps_server")
    await a.exit(m.allocation_id, 1)
    detail = await state(api)
    assert detail["jobStatus"]["state"] == "FAILED" and detail["jobStatus"]["retries"] == 1
    assert "MinFailedTaskCount 1" in detail["jobStatus"]["appExitDiagnostics"]


async def test_only_the_owner_or_an_admin_stops_a_job(api):
    agents = await two_agents(api)
    assert (await submit(api, job())).status_code == 202
    started = await starts(agents, 4)
    admin = (await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"]
    r = await api.post("/api/v1/users", json={"user": {"username": "mallory", "active": True}, "password": "pw12345"},
                       headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200, r.text
    mallory = (await api.post("/api/v1/auth/login", json={"username": "mallory", "password": "pw12345"})).json()
    hers = {"Authorization": f"Bearer {mallory['token']}"}
    url = "/api/v1/user/determined/jobs/tf-dist"
    r = await api.put(f"{url}/executionType", json={"value": "STOP"}, headers=hers)
    assert r.status_code == 403 and "owner" in r.json()["message"]
    assert (await api.get(f"{url}/config", headers=hers)).status_code == 403
    assert (await api.get(url, headers=hers)).status_code == 200  # reading the status is open to all
    r = await api.post("/api/v1/user/determined/jobs", json=job("hers"), headers=hers)
    assert r.status_code == 403 and "own name" in r.json()["message"]
    r = await api.put(f"{url}/executionType", json={"value": "STOP"})
    assert r.status_code == 202, r.text
    detail = await state(api)
    assert detail["jobStatus"]["state"] == "STOPPED" and detail["jobStatus"]["executionType"] == "STOP"
    kills = set()
    for a in agents:
        while not a.conn.outbox.empty():
            msg = await a.next_message()
            if isinstance(msg, wire.KillTask):
                kills.add(msg.allocation_id)
    assert kills == set(started)


@pytest.mark.parametrize(("change", "message"), [
    ({"jobName": "bad name"}, "jobName: must match"),
    ({"taskRoles": [{"name": "w", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 50, "gpuNumber": 0,
                     "command": "true"}]}, "taskRoles[0].memoryMB: no less than 100"),
    ({"codeDir": "hdfs://nn/code"}, "codeDir: HDFS URIs are not supported"),
    ({"virtualCluster": "nope"}, "virtualCluster: no resource pool 'nope'"),
    ({"image": "tensorflow-gpu"}, "image: no live agent of resource pool 'default' offers the environment"),
    ({"codeDir": "./code"}, "codeDir: the directory must be uploaded with the job"),
])
async def test_bad_jobs_are_refused_naming_field_and_rule_and_nothing_is_stored(api, change, message):
    await two_agents(api)
    r = await submit(api, job(**change))
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    assert (await api.get("/api/v1/user/determined/jobs")).json() == []


async def test_a_job_that_can_never_fit_the_pool_is_refused_with_why(api):
    await two_agents(api)
    body = job()
    body["taskRoles"][1]["gpuNumber"] = 3
    r = await submit(api, body)
    assert r.status_code == 400
    assert r.json()["message"] == ("invalid job: taskRoles[1].gpuNumber: each task needs 3 slots, and agents of "
                                   "resource pool 'default' have at most 2")
    # each role fits alone, but not all at once: the whole group's packing says why
    body["taskRoles"][1]["gpuNumber"] = 2
    body["taskRoles"][1]["taskNumber"] = 3
    r = await submit(api, body)
    assert r.status_code == 400
    assert "invalid job: taskRoles: a job whose tasks need 0, 0, 2, 2, 2 slots cannot run in pool 'default'" in \
        r.json()["message"]


async def test_a_job_name_is_unique_per_user_and_the_list_shows_it(api):
    assert (await submit(api, job())).status_code == 202
    r = await submit(api, job())
    assert r.status_code == 409 and "jobName: job tf-dist already exists" in r.json()["message"]
    jobs = (await api.get("/api/v1/jobs")).json()
    assert [(j["name"], j["username"], j["state"], j["totalTaskNumber"], j["totalGpuNumber"]) for j in jobs] == [
        ("tf-dist", "determined", "WAITING", 4, 2)]
    assert (await api.get("/api/v1/jobs", params={"limit": 1, "offset": 1})).json() == []
    assert (await api.get("/api/v1/user/determined/jobs/tf-dist/config")).json()["jobName"] == "tf-dist"


async def test_gpu_type_places_tasks_only_on_agents_with_that_gpu_model(api):
    k80 = FakeAgent(api.rt, "agent-k80", slots=2)
    k80.slots = [wire.Slot(id=i, type="cuda", brand="Tesla K80") for i in range(2)]
    a100 = FakeAgent(api.rt, "agent-a100", slots=2)
    a100.slots = [wire.Slot(id=i, type="cuda", brand="NVIDIA A100-SXM4-40GB") for i in range(2)]
    for a in (k80, a100):
        await a.register()
    r = await submit(api, job(gpuType="V100"))
    assert r.status_code == 400
    assert "gpuType: no agent of resource pool 'default' has a GPU model matching 'V100'" in r.json()["message"]
    assert (await submit(api, job(gpuType="a100"))).status_code == 202
    started = await starts([k80, a100], 4)
    assert {a.agent_id for a, _ in started.values()} == {"agent-a100"}
    assert k80.conn.outbox.empty()


async def test_a_code_dir_may_be_larger_than_a_context_up_to_openpais_limit(api, monkeypatch):
    import base64

    from controlplane.master.services import pai_jobs as svc

    monkeypatch.setattr(svc, "MAX_CONTEXT_BYTES", 10_000)  # scaled down: a context's 95 MiB ...
    monkeypatch.setattr(svc, "CODE_DIR_LIMIT", 20_000)  # ... and OpenPAI's 200 MB for codeDir
    files = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"#" * 15_000).decode(), "mode": 0o644}]
    r = await api.post("/api/v1/pai/jobs", json={"job": job(codeDir="./code"), "codeFiles": files})
    assert r.status_code == 202, r.text
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": "true"}, "files": files})
    assert r.status_code == 413 and "codeFiles: the context is larger than 10000 bytes" in r.json()["message"]
    big = [{**files[0], "content": base64.b64encode(b"#" * 25_000).decode()}]
    r = await api.post("/api/v1/pai/jobs", json={"job": job("bigger", codeDir="./code"), "codeFiles": big})
    assert r.status_code == 413 and "larger than 20000 bytes" in r.json()["message"]
