"""Jobs that cannot be placed say why, and jobs that never could are refused at submit.

- a job whose fixed ports lie outside the agents' range, whose tasks want one port on one host, or
  that needs more slots or CPUs than any agent has: a 400 listing every problem by field path;
- a waiting job shows the scheduler's reason in its OpenPAI answer (``jobStatus.waitingReason``) and
  in the queue (``v1Job.waitingReason``), experiments too, logged once per change;
- ``cpuNumber`` is booked on the agent like slots: a task waits for CPUs other tasks hold;
- a fixed port another job holds on the only host: the job waits, saying so.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment


def job(name: str, tasks: int = 1, cpus: int = 1, gpus: int = 0, ports: list[dict[str, Any]] | None = None,
        command: str = "sleep 60") -> dict[str, Any]:
    return {"jobName": name, "image": "default", "virtualCluster": "default", "taskRoles": [
        {"name": "main", "taskNumber": tasks, "cpuNumber": cpus, "memoryMB": 256, "gpuNumber": gpus,
         "portList": ports or [], "command": command}]}


async def submit(api, body: dict[str, Any]) -> Any:
    return await api.post("/api/v1/user/determined/jobs", json=body)


async def status(api, name: str) -> dict[str, Any]:
    r = await api.get(f"/api/v1/user/determined/jobs/{name}")
    assert r.status_code == 200, r.text
    return r.json()["jobStatus"]


async def queue(api) -> dict[str, dict[str, Any]]:
    r = await api.get("/api/v1/job-queues-v2")
    assert r.status_code == 200, r.text
    return {j["full"]["name"]: j["full"] for j in r.json()["jobs"]}


async def started(agent: FakeAgent) -> wire.StartTask:
    while True:
        msg = await agent.next_message()
        if isinstance(msg, wire.StartTask):
            return msg


async def test_a_job_that_could_never_be_placed_is_refused_with_every_problem(api):
    await FakeAgent(api.rt, "agent-1", slots=2, cpus=2).register()
    r = await submit(api, job("never", gpus=4, cpus=64, ports=[{"label": "data", "beginAt": 40000, "portNumber": 3}]))
    assert r.status_code == 400, r.text
    assert r.json()["message"] == (
        "invalid job: taskRoles[0].portList[0].beginAt: ports 40000-40002 (data) lie outside the agents' port range "
        "20000-31999: no agent can give them; "
        "taskRoles[0].gpuNumber: each task needs 4 slots, and agents of resource pool 'default' have at most 2; "
        "taskRoles[0].cpuNumber: each task needs 64 CPUs, and agents of resource pool 'default' have at most 2")
    # two tasks wanting port 25000, and every agent on one host (two agents of a local cluster)
    await FakeAgent(api.rt, "agent-2", slots=2, cpus=2).register()
    r = await submit(api, job("shared", tasks=2, ports=[{"label": "data", "beginAt": 25000, "portNumber": 1}]))
    assert r.status_code == 400, r.text
    assert r.json()["message"] == (
        "invalid job: taskRoles[0].portList[0].beginAt: its 2 tasks all want port 25000, so each needs a host of its "
        "own, and resource pool 'default' has 1 host")
    assert (await api.get("/api/v1/jobs")).json() == []


async def test_a_waiting_job_and_experiment_say_why_in_describe_and_the_queue_logged_once(api, caplog):
    caplog.set_level(logging.INFO, logger="controlplane.orchestrator")
    agent = FakeAgent(api.rt, "agent-1", slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 2}})
    trial = await started(agent)
    await agent.start(trial)
    assert (await submit(api, job("gpu", gpus=1))).status_code == 202
    for _ in range(3):
        await api.rt.orchestrator.tick()
    reason = "waiting for 1 slot: resource pool 'default' has 0 free of 1 slot"
    assert (await status(api, "gpu"))["waitingReason"] == reason
    listed = (await api.get("/api/v1/jobs")).json()
    assert [(j["name"], j["waitingReason"]) for j in listed] == [("gpu", reason)]
    jobs = await queue(api)
    assert jobs["gpu"]["waitingReason"] == reason
    assert jobs["unit"]["waitingReason"] == reason  # the experiment's second trial waits too
    assert [r.getMessage() for r in caplog.records].count(f"job {jobs['gpu']['jobId']} waits: {reason}") == 1
    # once placed, nothing waits and the field is gone
    await agent.exit(trial.allocation_id, 0)
    await started(agent)
    jobs = await queue(api)
    assert "waitingReason" not in jobs["unit"]
    assert (await status(api, "gpu"))["waitingReason"].startswith("waiting for 1 slot")


async def test_cpu_number_is_booked_on_the_agent_like_slots(api):
    agent = FakeAgent(api.rt, "agent-1", slots=2, cpus=2)
    await agent.register()
    assert (await submit(api, job("first", cpus=2))).status_code == 202
    first = await started(agent)
    await agent.start(first)
    assert (await submit(api, job("second", cpus=1))).status_code == 202
    for _ in range(2):
        await api.rt.orchestrator.tick()
    assert agent.conn.outbox.empty()  # a free slot, but no free CPU
    assert (await status(api, "second"))["waitingReason"] == (
        "waiting for CPUs: it needs 1 CPU, and agents of resource pool 'default' have at most 0 free on one agent")
    await agent.exit(first.allocation_id, 0)
    second = await started(agent)
    assert second.env["PAI_JOB_NAME"] == "second"
    assert (await status(api, "second"))["waitingReason"] == ""


async def test_a_fixed_port_held_by_another_job_makes_the_job_wait_saying_so(api):
    agent = FakeAgent(api.rt, "agent-1", slots=2)
    await agent.register()
    fixed = [{"label": "data", "beginAt": 25000, "portNumber": 1}]
    assert (await submit(api, job("holder", ports=fixed))).status_code == 202
    await agent.start(await started(agent))
    assert (await submit(api, job("wants", ports=fixed))).status_code == 202
    for _ in range(2):
        await api.rt.orchestrator.tick()
    await asyncio.sleep(0)
    assert agent.conn.outbox.empty()
    assert (await status(api, "wants"))["waitingReason"] == (
        "waiting for ports: ports 25000 are held by other work on the hosts of resource pool 'default' that could "
        "take its tasks")
