"""Task tokens are fenced: good only for their own allocation's trial and only while that run is current."""

from __future__ import annotations

from typing import cast

from sqlalchemy import update

from controlplane.master.db.models import Trial
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

ONE_TRIAL = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}
METRICS = {"group": "training", "metrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 1.0}}}}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def two_running_trials(api) -> tuple[wire.StartTask, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)
    m1, m2 = await agent.next_message(), await agent.next_message()
    assert isinstance(m1, wire.StartTask) and isinstance(m2, wire.StartTask)
    await agent.start(m1)
    await agent.start(m2)
    return m1, m2


async def test_a_task_token_reads_only_its_own_trial(api):
    m1, m2 = await two_running_trials(api)
    h = task_headers(m1.session_token)
    own, other = m1.env["DET_TRIAL_ID"], m2.env["DET_TRIAL_ID"]
    assert (await api.get(f"/api/v1/trials/{own}", headers=h)).status_code == 200
    assert (await api.get(f"/api/v1/trials/{other}", headers=h)).status_code == 403
    assert (await api.post(f"/api/v1/trials/{other}/metrics", json=METRICS, headers=h)).status_code == 403
    r = await api.get(f"/api/v1/allocations/{m2.allocation_id}/signals/preemption?timeout_seconds=0", headers=h)
    assert r.status_code == 403


async def test_a_task_token_cannot_write_logs_under_another_task(api):
    m1, m2 = await two_running_trials(api)
    h = task_headers(m1.session_token)
    line = {"log": "hello", "timestamp": None, "stdtype": "stdout", "source": "task"}
    ok = {"logs": [{**line, "taskId": m1.task_id, "allocationId": m1.allocation_id}]}
    assert (await api.post("/api/v1/task/logs", json=ok, headers=h)).status_code == 200
    for forged in ({"taskId": m2.task_id}, {"taskId": m2.task_id, "allocationId": m2.allocation_id},
                   {"allocationId": m2.allocation_id}):
        r = await api.post("/api/v1/task/logs", json={"logs": [{**line, **forged}]}, headers=h)
        assert r.status_code == 403, (forged, r.text)


async def test_a_requeued_trials_old_token_cannot_report_metrics(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, ONE_TRIAL)
    first = await agent.next_message()
    assert isinstance(first, wire.StartTask)
    await agent.start(first)
    trial = first.env["DET_TRIAL_ID"]
    old = task_headers(first.session_token)
    assert (await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=old)).status_code == 200  # cached
    await agent.exit(first.allocation_id, 1)  # fails: re-queued as run 2
    second = await agent.next_message()
    assert isinstance(second, wire.StartTask) and second.env["DET_TRIAL_RUN_ID"] == "2"
    await agent.start(second)
    r = await api.post(f"/api/v1/trials/{trial}/metrics/batch", json={"metrics": [METRICS]}, headers=old)
    assert r.status_code == 401, r.text
    assert (await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=old)).status_code == 401
    new = task_headers(second.session_token)
    assert (await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=new)).status_code == 200


async def test_a_token_of_a_superseded_run_is_refused_even_before_its_allocation_ends(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, ONE_TRIAL)
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    trial = int(start.env["DET_TRIAL_ID"])
    async with api.rt.sessions.begin() as session:  # the trial has moved on to another run
        await session.execute(update(Trial).where(Trial.id == trial).values(run_id=Trial.run_id + 1))
    r = await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=task_headers(start.session_token))
    assert r.status_code == 401 and "run" in r.json()["message"]
