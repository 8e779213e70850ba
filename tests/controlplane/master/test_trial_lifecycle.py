"""The trial lifecycle driven through a fake agent: placement, restarts, agent loss, completion."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from controlplane.master.db.models import Allocation, Trial
from controlplane.master.errors import Conflict
from controlplane.master.principals import TaskPrincipal
from controlplane.master.services import fencing
from controlplane.master.services import logs as log_svc
from controlplane.master.services import metrics as metric_svc
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # run fencing and requeues under concurrent writes


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def report_checkpoint(api, start: wire.StartTask, steps: int) -> str:
    ckpt = str(uuid.uuid4())
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "taskId": start.task_id, "allocationId": start.allocation_id, "reportTime": None,
        "state": "STATE_COMPLETED", "resources": {"state.pt": "10", "metadata.json": "26"},
        "metadata": {"steps_completed": steps}, "training": {}, "storageId": None})
    assert r.status_code == 200, r.text
    return ckpt


async def trial_states(api, exp_id: int) -> list[str]:
    return [t["state"] for t in (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]]


async def test_two_trials_run_and_complete(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api)
    starts = [await agent.next_message(), await agent.next_message()]
    assert all(isinstance(m, wire.StartTask) for m in starts)
    assert sorted(s for m in starts for s in m.slot_ids) == [0, 1]  # exact slot accounting
    for m in starts:
        assert m.env["DET_TRIAL_ID"] and m.env["DET_SESSION_TOKEN"] == m.session_token
        await agent.start(m)
    assert await trial_states(api, exp_id) == ["STATE_RUNNING", "STATE_RUNNING"]
    for m in starts:
        await agent.exit(m.allocation_id, 0)
    assert await trial_states(api, exp_id) == ["STATE_COMPLETED", "STATE_COMPLETED"]
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == 1.0


async def test_failed_trial_restarts_from_latest_checkpoint_until_max_restarts(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await agent.next_message()
    await agent.start(first)
    ckpt = await report_checkpoint(api, first, steps=5)
    await agent.exit(first.allocation_id, 1)
    second = await agent.next_message()
    assert isinstance(second, wire.StartTask)
    assert second.env["DET_LATEST_CHECKPOINT"] == ckpt and second.env["DET_STEPS_COMPLETED"] == "5"
    assert second.env["DET_TRIAL_RUN_ID"] == "2"
    # of a shared_fs, its task sees only the checkpoint it restores from (mounted read-only)
    assert first.readable_checkpoints == [] and second.readable_checkpoints == [ckpt]
    await agent.start(second)
    trial = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"][0]
    assert trial["state"] == "STATE_RUNNING" and trial["restarts"] == 1  # restarted once
    await agent.exit(second.allocation_id, 1)  # a second failure: no restart left (max_restarts 1)
    trial = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"][0]
    assert trial["state"] == "STATE_ERROR" and trial["restarts"] == 1  # it restarted once, not twice
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["state"] == "STATE_ERROR"


async def test_lost_agent_requeues_without_spending_a_restart(api):
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=1), FakeAgent(api.rt, "agent-2", slots=1)
    await a1.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await a1.next_message()
    await a1.start(first)
    ckpt = await report_checkpoint(api, first, steps=7)
    await a1.disconnect()
    await a2.register()
    second = await a2.next_message(timeout=15)  # after the 1 s reconnect window
    assert isinstance(second, wire.StartTask) and second.env["DET_LATEST_CHECKPOINT"] == ckpt
    trial = (await api.get(f"/api/v1/trials/{second.env['DET_TRIAL_ID']}")).json()["trial"]
    assert trial["restarts"] == 0


async def test_session_token_only_works_for_its_own_trial(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)
    m1, m2 = await agent.next_message(), await agent.next_message()
    own, other = m1.env["DET_TRIAL_ID"], m2.env["DET_TRIAL_ID"]
    body = {"group": "training", "metrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 1.0}}}}
    r = await api.post(f"/api/v1/trials/{own}/metrics", json=body, headers=task_headers(m1.session_token))
    assert r.status_code == 200
    r = await api.post(f"/api/v1/trials/{other}/metrics", json=body, headers=task_headers(m1.session_token))
    assert r.status_code == 403
    r = await api.get("/api/v1/experiments", headers=task_headers(m1.session_token))
    assert r.status_code == 403  # a task token is not a user token
    r = await api.post(f"/api/v1/trials/{own}/metrics", json=body, headers=task_headers("forged"))
    assert r.status_code == 401


async def test_pause_signals_preemption_and_activate_resumes(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await agent.next_message()
    await agent.start(first)
    h = task_headers(first.session_token)
    signal = f"/api/v1/allocations/{first.allocation_id}/signals/preemption?timeout_seconds=0"
    assert (await api.get(signal, headers=h)).json() == {"preempt": False}
    assert (await api.post(f"/api/v1/experiments/{exp_id}/pause")).status_code == 200
    assert (await api.get(signal, headers=h)).json() == {"preempt": True}
    ckpt = await report_checkpoint(api, first, steps=3)
    ack = await api.post(f"/api/v1/allocations/{first.allocation_id}/signals/ack_preemption", headers=h)
    assert ack.status_code == 200
    await agent.exit(first.allocation_id, 0)
    assert await trial_states(api, exp_id) == ["STATE_PAUSED"]
    await api.post(f"/api/v1/experiments/{exp_id}/activate")
    second = await agent.next_message()
    assert second.env["DET_LATEST_CHECKPOINT"] == ckpt


async def test_a_preemption_long_poll_waiting_when_the_spot_notice_comes_answers_true(api):
    """The long-poll is woken once the preemption is committed: woken before, it read the old row
    and the trial trained on for a whole poll (60 s) past its instance's notice."""
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await agent.next_message()
    await agent.start(first)
    signal = f"/api/v1/allocations/{first.allocation_id}/signals/preemption?timeout_seconds=60"
    poll = asyncio.create_task(api.get(signal, headers=task_headers(first.session_token)))
    key = ("preempt", first.allocation_id)
    for _ in range(1000):  # until the handler is waiting for its wake-up
        if key in api.rt.notifier._events or poll.done():
            break
        await asyncio.sleep(0.01)
    assert not poll.done(), poll.result().text
    await api.rt.orchestrator.agent_interrupted(agent.agent_id, "EC2 spot interruption: terminate")
    answer = await asyncio.wait_for(poll, 30)
    assert answer.json() == {"preempt": True}


async def test_a_gang_lives_and_dies_together(api):
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=2), FakeAgent(api.rt, "agent-2", slots=2)
    await a1.register()
    await a2.register()
    gang_config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "resources": {"slots_per_trial": 4}}
    await create_experiment(api, gang_config)
    r0, r1 = await a1.next_message(), await a2.next_message()
    assert (r0.rank, r1.rank) == (0, 1) and r0.allocation_id == r1.allocation_id
    assert r0.container_slot_counts == [2, 2] and r0.session_token == r1.session_token
    # Rank 1's agent goes away before its process starts: the reservation is not half-kept.
    await a1.start(r0)
    await a2.disconnect()
    kill = await a1.next_message(timeout=15)
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == r0.allocation_id
    await a1.exit(r0.allocation_id, 137)
    await a2.register()
    again = [await a1.next_message(), await a2.next_message()]
    assert {m.allocation_id for m in again} == {f"{r0.allocation_id[:-2]}.2"}
    trial = (await api.get(f"/api/v1/trials/{r0.env['DET_TRIAL_ID']}")).json()["trial"]
    assert trial["restarts"] == 0  # the lost agent was not the trial's fault
    # One rank failing stops the other.
    await a1.start(again[0])
    await a2.start(again[1])
    await a2.exit(again[1].allocation_id, 1)
    kill = await a1.next_message()
    assert isinstance(kill, wire.KillTask)


async def test_spot_interruption_preempts_the_agents_trials(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    start = await agent.next_message()
    await agent.start(start)
    signal = f"/api/v1/allocations/{start.allocation_id}/signals/preemption?timeout_seconds=0"
    h = task_headers(start.session_token)
    assert (await api.get(signal, headers=h)).json() == {"preempt": False}
    await api.rt.orchestrator.agent_interrupted("agent-1", "EC2 spot interruption: terminate")
    assert (await api.get(signal, headers=h)).json() == {"preempt": True}
    agents = (await api.get("/api/v1/agents")).json()["agents"]
    assert agents[0]["draining"] is True


METRICS = {"group": "training", "metrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {"loss": 1.0}}}}


async def test_a_requeued_trials_old_run_cannot_write_while_the_new_run_can(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await agent.next_message()
    await agent.start(first)
    trial = int(first.env["DET_TRIAL_ID"])
    old, line = task_headers(first.session_token), {"log": "from run 1", "taskId": first.task_id}
    assert (await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=old)).status_code == 200
    await agent.exit(first.allocation_id, 1)  # fails: re-queued as run 2
    second = await agent.next_message()
    assert isinstance(second, wire.StartTask) and second.env["DET_TRIAL_RUN_ID"] == "2"
    await agent.start(second)
    for path, body in ((f"/api/v1/trials/{trial}/metrics", {**METRICS, "group": "late"}),
                       ("/api/v1/task/logs", {"logs": [line]}),
                       (f"/api/v1/trials/{trial}/progress", {"progress": 0.9}),
                       (f"/api/v1/trials/{trial}/early_exit", {"reason": "EXITED_REASON_INVALID_HP"})):
        r = await api.post(path, json=body, headers=old)
        assert r.status_code in (401, 409), (path, r.text)  # the token lookup or the write's own fence
    new = task_headers(second.session_token)
    assert (await api.post(f"/api/v1/trials/{trial}/metrics", json=METRICS, headers=new)).status_code == 200
    r = await api.post("/api/v1/task/logs", json={"logs": [{"log": "from run 2", "taskId": second.task_id}]},
                       headers=new)
    assert r.status_code == 200
    rows = (await api.get(f"/api/v1/trials/{trial}/metrics")).json()["metrics"]
    assert sorted((m["group"], m["trialRunId"]) for m in rows) == [("training", 1), ("training", 2)]
    logs = [line for line in (await api.get(f"/api/v1/trials/{trial}/logs")).text.splitlines() if "from run" in line]
    assert len(logs) == 1 and "from run 2" in logs[0]
    trial_json = (await api.get(f"/api/v1/trials/{trial}")).json()["trial"]
    assert trial_json["progress"] != 0.9


async def test_the_write_itself_refuses_a_superseded_run(api):
    """However the old run's request got past the token lookup (a lookup cached just before the
    re-queue committed), the transaction that writes refuses it and stores nothing."""
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    first = await agent.next_message()
    await agent.start(first)
    trial = int(first.env["DET_TRIAL_ID"])
    stale = TaskPrincipal(first.allocation_id, first.task_id, trial, 1)
    report = metric_svc.Report("training", 5, None, None, {"loss": 1.0}, None)
    await metric_svc.store_reports(api.rt, stale, trial, [report])  # still the current run: stored
    await agent.disconnect()  # past agent_reconnect_wait_s (1 s): the allocation ends, run 2 is queued
    for _ in range(200):  # the reaper runs on the orchestrator's tick once the window has passed
        api.rt.orchestrator.wake()
        async with api.rt.sessions() as session:
            if (await session.get(Trial, trial)).run_id == 2:
                break
        await asyncio.sleep(0.1)
    with pytest.raises(Conflict, match="moved on to run 2"):
        await metric_svc.store_reports(api.rt, stale, trial, [metric_svc.Report("training", 6, None, None, {}, None)])
    with pytest.raises(Conflict, match="run 2"):
        await log_svc.post_task_logs(api.rt, stale, log_svc.PostTaskLogsRequest(logs=[log_svc.TaskLogEntry(log="x")]))
    with pytest.raises(Conflict):
        async with api.rt.sessions.begin() as session:
            await fencing.update_trial(session, stale, trial, {"progress": 0.5})
    rows = (await api.get(f"/api/v1/trials/{trial}/metrics")).json()["metrics"]
    assert [m["stepsCompleted"] for m in rows] == [5]
    assert "x\n" not in (await api.get(f"/api/v1/trials/{trial}/logs")).text


async def test_a_gang_whose_rank_failed_to_start_ends_with_that_reason(api):
    """The other ranks are then killed; the allocation's end says why the gang stopped, not "killed"."""
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=2), FakeAgent(api.rt, "agent-2", slots=2)
    await a1.register()
    await a2.register()
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "resources": {"slots_per_trial": 4},
              "max_restarts": 0}
    exp_id = await create_experiment(api, config)
    r0, r1 = await a1.next_message(), await a2.next_message()
    await a1.start(r0)
    await api.rt.orchestrator.task_exited("agent-2", wire.TaskExited(
        r1.allocation_id, None, "failed to start: [Errno 17] File exists: '/ckpts'"))
    kill = await a1.next_message()
    assert isinstance(kill, wire.KillTask)
    await api.rt.orchestrator.task_exited("agent-1", wire.TaskExited(r0.allocation_id, 143, "killed"))
    assert await trial_states(api, exp_id) == ["STATE_ERROR"]
    async with api.rt.sessions() as session:
        alloc = await session.get(Allocation, r0.allocation_id)
    assert alloc.exit_reason.startswith("failed to start: [Errno 17] File exists"), alloc.exit_reason
