"""Every kind of job in the job queue: experiments, commands, shells, notebooks and OpenPAI jobs are
listed in the scheduler's order with Determined's v1Job types, are moved with `det job update`
like experiments (and the scheduler follows), named by short ids across both tables, owned, and
refused what only experiments have here (a weight, a move to another pool)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy import update as sql_update

from controlplane.master.db.models import Experiment, PaiJob
from controlplane.master.orchestration import snapshot
from controlplane.master.services import jobs as svc
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_job_queue_api import api2, jobs, one_trial, update  # noqa: F401 (a fixture)
from tests.controlplane.master.test_ownership import add_user

PAI_JOB = {"jobName": "j", "image": "default",
           "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 1,
                          "command": "true"}]}


async def command(api, headers: dict | None = None, **config: Any) -> str:
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": "true", **config}}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["command"]["id"]


async def shell(api, **config: Any) -> str:
    r = await api.post("/api/v1/shells", json={"config": config})
    assert r.status_code == 200, r.text
    return r.json()["shell"]["id"]


async def pai_job(api, user: str = "determined", **changes: Any) -> str:
    """Submits an OpenPAI job; its job id (what the queue names it by)."""
    body = {**PAI_JOB, **changes}
    r = await api.post(f"/api/v1/user/{user}/jobs", json=body)
    assert r.status_code == 202, r.text
    async with api.rt.sessions() as session:
        return (await session.scalars(select(PaiJob.job_id).where(PaiJob.name == body["jobName"]))).one()


def by_entity(rows: list[dict]) -> dict[str, dict]:
    return {j["entityId"]: j for j in rows}


async def test_every_kind_is_listed_in_priority_order_with_its_type(api):
    exp = await create_experiment(api, one_trial())
    cmd = await command(api, description="say true")
    sh = await shell(api)
    pai = await pai_job(api)
    listed = await jobs(api)
    # One priority (the pool's default): submission order.
    assert [(j["type"], j["entityId"], j["name"]) for j in listed] == [
        ("TYPE_EXPERIMENT", str(exp), "unit"), ("TYPE_COMMAND", cmd, "say true"),
        ("TYPE_SHELL", sh, f"Shell (shell-{sh})"), ("TYPE_GENERIC", "j", "j")]
    assert [j["jobId"] for j in listed[1:3]] == [cmd, sh]  # a command's id is its job id
    assert listed[3]["jobId"] == pai and len(pai) == 36
    assert [j["isPreemptible"] for j in listed] == [True, False, False, False]
    assert all(j["progress"] == 0 and j["priority"] == 42 and j["requestedSlots"] == 1 and j["allocatedSlots"] == 0
               and j["summary"]["state"] == "STATE_QUEUED" and j["resourcePool"] == "default"
               and j["username"] == "determined" for j in listed)
    # Priorities set through the queue order every kind alike.
    r = await api.post("/api/v1/job-queues", json={"updates": [
        {"jobId": pai, "priority": 10}, {"jobId": sh[:8], "priority": 20}, {"jobId": cmd, "priority": 60}]})
    assert r.status_code == 200, r.text
    listed = await jobs(api)
    assert [(j["type"], j["priority"], j["summary"]["jobsAhead"]) for j in listed] == [
        ("TYPE_GENERIC", 10, 0), ("TYPE_SHELL", 20, 1), ("TYPE_EXPERIMENT", 42, 2), ("TYPE_COMMAND", 60, 3)]
    # The web UI's Job Queue page: the same order, each row's type, a link only for the experiment.
    page = (await api.get("/jobs")).text
    assert re.findall(r'<tr data-job-id="([^"]+)"', page) == [j["jobId"] for j in listed]
    cells = re.findall(r"<td>(EXPERIMENT|COMMAND|SHELL|GENERIC)</td>", page)
    assert cells == ["GENERIC", "SHELL", "EXPERIMENT", "COMMAND"]
    assert page.count('href="/experiments/') == 1 and "<td>say true</td>" in page
    # A job that ended leaves the queue.
    assert (await api.post(f"/api/v1/commands/{cmd}/kill")).status_code == 200
    assert cmd not in {j["jobId"] for j in await jobs(api)}
    r = await update(api, jobId=cmd, priority=3)
    assert r.status_code == 400 and r.json()["message"] == f"updates[0].jobId: job {cmd} has already finished (STOPPED)"


async def test_a_command_moved_ahead_of_an_experiment_runs_first(api):
    exp = await create_experiment(api, one_trial())
    cmd = await command(api)
    ids = {j["entityId"]: j["jobId"] for j in await jobs(api)}
    assert list(ids) == [str(exp), cmd]
    r = await update(api, jobId=cmd[:8], aheadOf=ids[str(exp)][:8])
    assert r.status_code == 200, r.text
    listed = await jobs(api)
    assert [j["entityId"] for j in listed] == [cmd, str(exp)]
    # What the scheduler is given: the command's request now sorts first (same priority, earlier place).
    async with api.rt.sessions() as session:
        snap = await snapshot.take(session, api.rt)
        rows = await svc.job_rows(session, api.rt)
    requests = {r.job_id: r for r in snap.pending}
    first, second = requests[cmd], requests[ids[str(exp)]]
    assert first.priority == second.priority == 42 and first.queue_position < second.queue_position
    assert [(r.kind, r.priority, r.queue_position) for r in rows] == [
        ("command", 42, first.queue_position), ("experiment", 42, second.queue_position)]
    # One slot: the command starts, the experiment waits for it.
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.entrypoint[-1] == "true"
    await agent.start(start)
    assert [(j["entityId"], j["summary"]["state"], j["allocatedSlots"]) for j in await jobs(api)] == [
        (cmd, "STATE_SCHEDULED", 1), (str(exp), "STATE_QUEUED", 0)]
    pools = (await api.get("/api/v1/resource-pools")).json()["resourcePools"]
    assert pools[0]["slotsUsed"] == 1  # the command's slot counts as used


async def test_only_experiments_change_pool_or_have_a_weight(api2):  # noqa: F811
    cmd = await command(api2)
    r = await update(api2, jobId=cmd, resourcePool="shared")
    assert r.status_code == 400
    assert r.json()["message"] == (f"updates[0].resourcePool: only experiments move to another resource pool; "
                                   f"job {cmd} is a command (TYPE_COMMAND)")
    assert [j["jobId"] for j in await jobs(api2)] == [cmd] and await jobs(api2, "shared") == []
    pai = await pai_job(api2, "admin", virtualCluster="shared")
    shared = await jobs(api2, "shared")
    assert [(j["jobId"], j["type"], j["weight"]) for j in shared] == [(pai, "TYPE_GENERIC", 1.0)]
    r = await update(api2, jobId=pai[:8], weight=2)
    assert r.status_code == 400
    assert r.json()["message"] == (f"updates[0].weight: only experiments have a weight here; job {pai} is "
                                   f"an OpenPAI job (TYPE_GENERIC)")
    # A batch with one such update changes nothing.
    exp = await create_experiment(api2, one_trial("shared"))
    exp_job = by_entity(await jobs(api2, "shared"))[str(exp)]["jobId"]
    r = await api2.post("/api/v1/job-queues", json={"updates": [{"jobId": exp_job, "weight": 3},
                                                                 {"jobId": pai, "weight": 3}]})
    assert r.status_code == 400 and r.json()["message"].startswith("updates[1].weight: only experiments")
    assert by_entity(await jobs(api2, "shared"))[str(exp)]["weight"] == 1.0


async def test_only_the_owner_or_an_admin_changes_a_shell(api):
    sh = await shell(api)
    olga = await add_user(api, "olga")
    r = await api.post("/api/v1/job-queues", json={"updates": [{"jobId": sh, "priority": 3}]}, headers=olga)
    assert r.status_code == 403, r.text
    assert r.json()["message"] == f"only the owner of job {sh} (a shell) or an admin may edit it"
    # Her own command may go ahead of the shell: she changes only her own job.
    mine = await command(api, headers=olga)
    r = await api.post("/api/v1/job-queues", json={"updates": [{"jobId": mine, "aheadOf": sh}]}, headers=olga)
    assert r.status_code == 200, r.text
    assert [(j["jobId"], j["username"]) for j in await jobs(api)] == [(mine, "olga"), (sh, "determined")]


async def test_short_ids_name_commands_and_pai_jobs_across_both_tables(api):
    exp = await create_experiment(api, one_trial())
    cmd = await command(api)
    pai = await pai_job(api)
    assert (await update(api, jobId=cmd[:8], priority=7)).status_code == 200
    assert (await update(api, jobId=pai[:10], behindOf=cmd[:8])).status_code == 200
    assert [(j["jobId"], j["priority"]) for j in await jobs(api)] == [(cmd, 7), (pai, 7), (
        by_entity(await jobs(api))[str(exp)]["jobId"], 42)]
    # A prefix an experiment and a command share names neither.
    async with api.rt.sessions.begin() as session:
        await session.execute(sql_update(Experiment).where(Experiment.id == exp)
                              .values(job_id="5eed5eed-0000-4000-8000-000000000000"))
        await session.execute(sql_update(PaiJob).where(PaiJob.job_id == cmd)
                              .values(job_id="5eed5eed-0001-4000-8000-000000000000"))
    r = await update(api, jobId="5eed5eed", priority=3)
    assert r.status_code == 400
    assert r.json()["message"] == ("updates[0].jobId: job id prefix '5eed5eed' is ambiguous: it matches "
                                   "5eed5eed-0000-4000-8000-000000000000, 5eed5eed-0001-4000-8000-000000000000; "
                                   "give more characters")
    assert (await update(api, jobId="5eed5eed-0001", priority=3)).status_code == 200
    assert (await jobs(api))[0]["jobId"] == "5eed5eed-0001-4000-8000-000000000000"
