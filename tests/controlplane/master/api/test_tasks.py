"""Determined's ``GET /api/v1/tasks/{id}`` and ``GET /api/v1/tasks/{id}/logs`` for commands, shells
and trials, with a fake agent: a command's task id is its own id, its allocations carry
Determined's states and ``isReady``, and its lines stream as ``{"result": v1TaskLogsResponse}``
with Determined's filters; who may read them is the commands' and trials' rule."""

from __future__ import annotations

import asyncio
import json

import pytest

from controlplane.master.services import logs as log_svc
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, one_running_trial
from tests.controlplane.master.test_authorization import task_headers
from tests.controlplane.master.test_ownership import add_user


def lines_of(text: str) -> list[dict]:
    return [json.loads(line)["result"] for line in text.splitlines() if line]


async def started(api, kind: str = "command", body: dict | None = None) -> tuple[FakeAgent, dict, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    r = await api.post(f"/api/v1/{kind}s", json=body or {"config": {"entrypoint": ["echo", "hi"]}})
    assert r.status_code == 200, r.text
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    return agent, r.json()[kind], start


async def log(api, agent: FakeAgent, start: wire.StartTask, *lines: tuple[str, str]) -> None:
    await log_svc.ingest_agent_logs(api.rt, agent.agent_id, wire.TaskLogs(start.allocation_id, [
        wire.LogLine(timestamp=1_700_000_000.0 + i, message=text, stdtype=std) for i, (text, std) in enumerate(lines)]))


async def test_a_commands_task_is_the_command_with_its_allocation_and_end(api):
    agent, cmd, start = await started(api)
    assert start.task_id == cmd["id"] and cmd["taskId"] == cmd["id"]  # Determined's: the command's own id
    task = (await api.get(f"/api/v1/tasks/{cmd['id']}")).json()["task"]
    assert (task["taskId"], task["taskType"], task["endTime"]) == (cmd["id"], "TASK_TYPE_COMMAND", None)
    [alloc] = task["allocations"]
    assert (alloc["allocationId"], alloc["state"], alloc["isReady"]) == (start.allocation_id, "STATE_STARTING", False)
    await agent.start(start)
    [alloc] = (await api.get(f"/api/v1/tasks/{cmd['id']}")).json()["task"]["allocations"]
    assert (alloc["state"], alloc["isReady"], alloc["slots"]) == ("STATE_RUNNING", True, 1)
    await agent.exit(start.allocation_id, 3)
    task = (await api.get(f"/api/v1/tasks/{cmd['id']}")).json()["task"]
    assert task["endTime"] and task["allocations"][0]["state"] == "STATE_TERMINATED"
    assert task["allocations"][0]["statusCode"] == 3

    r = await api.get("/api/v1/tasks/00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404 and "task 00000000-0000-0000-0000-000000000000" in r.json()["message"]
    assert (await api.get("/api/v1/tasks/00000000-0000-0000-0000-000000000000/logs")).status_code == 404


async def test_a_trials_task_is_answered_too(api):
    _, start, _ = await one_running_trial(api)
    task = (await api.get(f"/api/v1/tasks/{start.task_id}")).json()["task"]
    assert task["taskType"] == "TASK_TYPE_TRIAL" and task["allocations"][0]["state"] == "STATE_RUNNING"


# Both databases: the timestamp filters compare stored times (text on SQLite, timestamptz on PostgreSQL).
@pytest.mark.both_databases
async def test_task_logs_stream_determineds_lines_with_its_filters(api):
    agent, cmd, start = await started(api)
    await agent.start(start)
    await log(api, agent, start, ("a", "stdout"), ("oops", "stderr"), ("b", "stdout"))
    r = await api.get(f"/api/v1/tasks/{cmd['id']}/logs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    got = lines_of(r.text)
    assert [g["log"] for g in got] == ["a\n", "oops\n", "b\n"]
    first = got[0]
    assert (first["taskId"], first["allocationId"], first["containerId"]) == (cmd["id"],) + (start.allocation_id,) * 2
    assert first["level"] == "LOG_LEVEL_INFO" and first["message"].endswith("|| INFO: a\n")
    assert first["timestamp"].startswith("2023-11-14T22:13:20") and first["stdtype"] == "stdout"

    def logs(**params):
        return api.get(f"/api/v1/tasks/{cmd['id']}/logs", params=params)

    assert [g["log"] for g in lines_of((await logs(stdtypes="stderr")).text)] == ["oops\n"]
    assert [g["log"] for g in lines_of((await logs(limit=2, orderBy="ORDER_BY_DESC")).text)] == ["b\n", "oops\n"]
    assert [g["log"] for g in lines_of((await logs(limit=1)).text)] == ["a\n"]
    after = lines_of((await logs(timestampAfter="2023-11-14T22:13:20Z")).text)
    assert [g["log"] for g in after] == ["oops\n", "b\n"]
    assert [g["log"] for g in lines_of((await logs(searchText="oo")).text)] == ["oops\n"]
    for params, field in (({"levels": "LOUD"}, "levels"), ({"timestampBefore": "yesterday"}, "timestampBefore"),
                          ({"orderBy": "SIDEWAYS"}, "orderBy"), ({"limit": -1}, "limit")):
        r = await logs(**params)
        assert r.status_code == 400 and field in r.text, (params, r.text)

    # follow: the stream ends once the task has ended and its last lines are in
    follow = asyncio.create_task(logs(follow="true"))
    await asyncio.sleep(0.3)
    assert not follow.done()
    await log(api, agent, start, ("last", "stdout"))
    await agent.exit(start.allocation_id, 0)
    r = await asyncio.wait_for(follow, 20)
    assert [g["log"] for g in lines_of(r.text)] == ["a\n", "oops\n", "b\n", "last\n"]


async def test_who_reads_a_task_and_its_logs(api):
    agent, cmd, start = await started(api)
    await agent.start(start)
    await log(api, agent, start, ("secret-ish", "stdout"))
    other = await add_user(api, "olga")
    # anyone who may read the command (its get and its own logs route) reads its task and logs
    assert (await api.get(f"/api/v1/tasks/{cmd['id']}", headers=other)).status_code == 200
    assert (await api.get(f"/api/v1/commands/{cmd['id']}/logs", headers=other)).status_code == 200
    assert lines_of((await api.get(f"/api/v1/tasks/{cmd['id']}/logs", headers=other)).text)[0]["log"] == "secret-ish\n"
    # a task token: its own task only
    mine = task_headers(start.session_token)
    assert (await api.get(f"/api/v1/tasks/{cmd['id']}", headers=mine)).status_code == 200
    _, trial_start, _ = await one_running_trial_elsewhere(api)
    r = await api.get(f"/api/v1/tasks/{cmd['id']}/logs", headers=task_headers(trial_start.session_token))
    assert r.status_code == 403, r.text
    # no credentials: none
    assert (await api.get(f"/api/v1/tasks/{cmd['id']}", headers={"Authorization": ""})).status_code == 401


async def one_running_trial_elsewhere(api):
    from tests.controlplane.master.conftest import CONFIG, create_experiment

    agent = FakeAgent(api.rt, agent_id="agent-2", slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    start = await agent.next_message()
    await agent.start(start)
    return agent, start, int(start.env["DET_TRIAL_ID"])
