"""Task logs: who may post them, NUL characters, and the NDJSON stream's pages and failures."""

from __future__ import annotations

import json

import pytest

from controlplane.master.api import logs as logs_api
from controlplane.master.services.logs import ingest_agent_logs
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_trial_lifecycle import task_headers

pytestmark = pytest.mark.both_databases  # NUL characters, and the log stream's pages in both orders

ONE_TRIAL = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


async def running(api, headers: dict | None = None) -> wire.StartTask:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    if headers is None:
        await create_experiment(api, ONE_TRIAL)
    else:
        body_headers = dict(api.headers)
        api.headers.update(headers)
        try:
            await create_experiment(api, ONE_TRIAL)
        finally:
            api.headers.clear()
            api.headers.update(body_headers)
    start = await agent.next_message()
    await agent.start(start)
    return start


def results(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def post_lines(api, start: wire.StartTask, *texts: str) -> None:
    body = {"logs": [{"log": t, "taskId": start.task_id, "allocationId": start.allocation_id} for t in texts]}
    r = await api.post("/api/v1/task/logs", json=body, headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text


async def test_nul_characters_in_log_text_are_kept_as_replacement_characters(api):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, "before\x00after")
    await ingest_agent_logs(api.rt, "agent-1", wire.TaskLogs(start.allocation_id, [
        wire.LogLine(timestamp=0.0, message="agent\x00line")]))
    logs = [e["result"]["log"] for e in results((await api.get(f"/api/v1/trials/{tid}/logs")).text)]
    assert logs == ["before\ufffdafter\n", "agent\ufffdline\n"]


async def test_a_task_posts_lines_only_under_its_own_task_and_allocation(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)
    m1, m2 = await agent.next_message(), await agent.next_message()
    h = task_headers(m1.session_token)
    for forged, field in (({"taskId": m2.task_id}, "logs[1].taskId"),
                          ({"taskId": m1.task_id, "allocationId": m2.allocation_id}, "logs[1].allocationId")):
        body = {"logs": [{"log": "mine", "taskId": m1.task_id}, {"log": "forged", **forged}]}
        r = await api.post("/api/v1/task/logs", json=body, headers=h)
        assert r.status_code == 403 and field in r.json()["message"], r.text
    assert "forged" not in (await api.get(f"/api/v1/trials/{m2.env['DET_TRIAL_ID']}/logs")).text
    assert "mine" not in (await api.get(f"/api/v1/trials/{m1.env['DET_TRIAL_ID']}/logs")).text  # all or nothing
    r = await api.post("/api/v1/task/logs", json={"logs": [{"log": "no task id"}]}, headers=h)
    assert r.status_code == 200  # a task's lines default to its own task


async def test_users_write_into_trials_they_own_only(api):
    login = await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
    admin = {"Authorization": f"Bearer {login.json()['token']}"}
    start = await running(api, headers=admin)  # admin's experiment; `api` signs in as determined
    tid = int(start.env["DET_TRIAL_ID"])
    metrics = {"group": "training", "metrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 1.0}}}}
    writes = [(f"/api/v1/trials/{tid}/metrics", metrics),
              (f"/api/v1/trials/{tid}/metrics/batch", {"reports": [{**metrics["metrics"], "group": "training"}]}),
              (f"/api/v1/trials/{tid}/progress", {"progress": 0.5}),
              (f"/api/v1/trials/{tid}/runner/metadata", {"state": "training"}),
              (f"/api/v1/trials/{tid}/early_exit", {"reason": "EXITED_REASON_INVALID_HP"}),
              ("/api/v1/task/logs", {"logs": [{"log": "hi", "taskId": start.task_id}]}),
              ("/api/v1/runs/start", {"runId": tid}),
              (f"/api/v1/allocations/{start.allocation_id}/signals/ack_preemption", {})]
    for path, body in writes:
        r = await api.post(path, json=body)
        assert r.status_code == 403, (path, r.text)
    assert (await api.get(f"/api/v1/trials/{tid}/metrics")).json()["metrics"] == []
    for path, body in writes:
        r = await api.post(path, json=body, headers=admin)
        assert r.status_code == 200, (path, r.text)


@pytest.fixture
def small_pages(monkeypatch):
    monkeypatch.setattr(logs_api, "PAGE", 2)


async def test_the_stream_pages_in_both_orders(api, small_pages):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, *[f"line {i}" for i in range(7)])
    path = f"/api/v1/trials/{tid}/logs"

    async def read(**params) -> list[str]:
        r = await api.get(path, params=params)
        assert r.status_code == 200, r.text
        return [e["result"]["log"].strip() for e in results(r.text)]

    every = [f"line {i}" for i in range(7)]
    assert await read() == every
    assert await read(orderBy="ORDER_BY_DESC") == every[::-1]
    assert await read(orderBy="ORDER_BY_DESC", limit=3) == every[:-4:-1]
    assert await read(limit=5) == every[:5]
    assert await read(searchText="line 3") == ["line 3"]
    assert await read(searchText="%") == []  # a LIKE wildcard is text, not a pattern


async def test_a_failure_mid_stream_ends_it_with_an_error_line(api, small_pages, monkeypatch):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, *[f"line {i}" for i in range(5)])
    real, calls = logs_api.read_page, []

    async def failing(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return await real(*args)

    monkeypatch.setattr(logs_api, "read_page", failing)
    r = await api.get(f"/api/v1/trials/{tid}/logs", params={"follow": "true"})
    assert r.status_code == 200
    lines = results(r.text)
    assert [e["result"]["log"] for e in lines[:2]] == ["line 0\n", "line 1\n"]
    assert len(lines) == 3 and "failed" in lines[2]["error"]["message"]
