"""Preemption waits for the trial (the experiment's, the pool's or the master's timeout, in that
order), a trial killed after ignoring it says so in its logs, `det e cancel` preempts, and a user's
trial kill is no failure (orchestrator.py, user_requests.py)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import cast

import pytest
from sqlalchemy import update

from controlplane.common.timeutil import aware, utcnow
from controlplane.master.db.models import Allocation
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment, one_running_trial

ONE = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def exp_state(api, exp_id: int) -> str:
    return (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["state"]


async def trial_states(api, exp_id: int) -> dict[int, str]:
    trials = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    return {t["id"]: t["state"] for t in trials}


async def allocation(api, alloc_id: str) -> Allocation:
    async with api.rt.sessions() as session:
        alloc = await session.get(Allocation, alloc_id)
    assert alloc is not None
    return alloc


async def preempt_signal(api, start: wire.StartTask) -> bool:
    r = await api.get(f"/api/v1/allocations/{start.allocation_id}/signals/preemption?timeout_seconds=0",
                      headers=task_headers(start.session_token))
    return r.json()["preempt"]


async def started_trial(api, agent: FakeAgent, config: dict) -> tuple[int, wire.StartTask]:
    exp_id = await create_experiment(api, config)
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask), start
    await agent.start(start)
    return exp_id, start


async def timeout_given(api, start: wire.StartTask) -> float:
    alloc = await allocation(api, start.allocation_id)
    assert alloc.preempt_requested and alloc.preempt_deadline is not None and alloc.preempt_requested_at is not None
    return (aware(alloc.preempt_deadline) - aware(alloc.preempt_requested_at)).total_seconds()


async def test_the_timeout_is_the_experiments_else_the_pools_else_the_masters(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    # the master's (the fixture's 600 s): no pool or experiment value
    exp_id, start = await started_trial(api, agent, ONE)
    assert (await api.post(f"/api/v1/experiments/{exp_id}/pause")).status_code == 200
    assert await timeout_given(api, start) == 600
    assert (await allocation(api, start.allocation_id)).preempt_reason == "experiment paused"
    await agent.exit(start.allocation_id, 0)  # it exits without acknowledging: it finished
    # the pool's task_container_defaults.preemption_timeout wins over the master's
    settings = api.rt.settings
    settings.pools = [dataclasses.replace(p, preemption_timeout_s=120.0) for p in settings.pools]
    exp_id, start = await started_trial(api, agent, ONE)
    await api.post(f"/api/v1/experiments/{exp_id}/pause")
    assert await timeout_given(api, start) == 120
    await agent.exit(start.allocation_id, 0)
    # the experiment's own preemption_timeout wins over both
    exp_id, start = await started_trial(api, agent, {**ONE, "preemption_timeout": 7})
    assert (await allocation(api, start.allocation_id)).preemption_timeout_s == 7
    await api.post(f"/api/v1/experiments/{exp_id}/pause")
    assert await timeout_given(api, start) == 7


@pytest.mark.both_databases  # the deadline is compared in SQL
async def test_a_trial_that_ignores_its_preemption_is_killed_at_the_deadline_and_its_logs_say_so(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id, start = await started_trial(api, agent, {**ONE, "preemption_timeout": 1})
    trial_id = int(start.env["DET_TRIAL_ID"])
    await api.post(f"/api/v1/experiments/{exp_id}/pause")
    kill = await agent.next_message()  # a second later, at a tick
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id
    logs = [json.loads(line)["result"] for line in (await api.get(f"/api/v1/trials/{trial_id}/logs")).text.splitlines()
            if line.strip()]
    killed = [e for e in logs if e["log"].startswith("[master] killed")]
    assert [e["log"] for e in killed] == [
        "[master] killed: it did not checkpoint and exit within the preemption timeout (1s) after it was asked "
        "to (experiment paused)\n"]
    assert killed[0]["level"] == "LOG_LEVEL_WARNING"
    await agent.exit(start.allocation_id, 137)
    assert await trial_states(api, exp_id) == {trial_id: "STATE_PAUSED"}  # no failure: it resumes when activated
    await api.post(f"/api/v1/experiments/{exp_id}/activate")
    again = await agent.next_message()
    assert isinstance(again, wire.StartTask) and again.env["DET_TRIAL_ID"] == str(trial_id)
    trial = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]
    assert trial["restarts"] == 0


async def test_activated_while_its_process_still_stops_the_trial_reads_running_then_resumes(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id, start = await started_trial(api, agent, ONE)
    trial_id = int(start.env["DET_TRIAL_ID"])
    await api.post(f"/api/v1/experiments/{exp_id}/pause")
    assert await trial_states(api, exp_id) == {trial_id: "STATE_PAUSED"}
    await api.post(f"/api/v1/experiments/{exp_id}/activate")
    # Active again at once, though its old process has not yet checkpointed and exited.
    assert await exp_state(api, exp_id) == "STATE_ACTIVE"
    assert await trial_states(api, exp_id) == {trial_id: "STATE_RUNNING"}
    assert await preempt_signal(api, start)  # the pause's preemption still stands
    ack = await api.post(f"/api/v1/allocations/{start.allocation_id}/signals/ack_preemption",
                         headers=task_headers(start.session_token))
    assert ack.status_code == 200
    await agent.exit(start.allocation_id, 0)
    again = await agent.next_message()
    assert isinstance(again, wire.StartTask) and again.env["DET_TRIAL_ID"] == str(trial_id)
    await agent.start(again)
    trial = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]
    assert trial["state"] == "STATE_RUNNING" and trial["restarts"] == 0


@pytest.mark.both_databases
async def test_a_preemption_asked_for_before_deadlines_were_stored_gets_the_masters_timeout(api):
    agent, start, _ = await one_running_trial(api)
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Allocation).where(Allocation.id == start.allocation_id).values(
            preempt_requested=True, preempt_deadline=None, preempt_requested_at=utcnow() - timedelta(seconds=601)))
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id


async def test_cancel_preempts_the_running_trial_and_cancels_the_queued_one(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id, start = await started_trial(api, agent, CONFIG)  # two trials, one slot: one runs, one waits
    running = int(start.env["DET_TRIAL_ID"])
    queued = next(t for t in await trial_states(api, exp_id) if t != running)
    assert not await preempt_signal(api, start)
    assert (await api.post(f"/api/v1/experiments/{exp_id}/cancel")).status_code == 200
    assert await exp_state(api, exp_id) == "STATE_STOPPING_CANCELED"
    assert await trial_states(api, exp_id) == {running: "STATE_STOPPING_CANCELED", queued: "STATE_CANCELED"}
    assert await preempt_signal(api, start)  # asked to checkpoint and exit, not killed
    assert await timeout_given(api, start) == 600
    h = task_headers(start.session_token)
    assert (await api.post(f"/api/v1/allocations/{start.allocation_id}/signals/ack_preemption",
                           headers=h)).status_code == 200
    await agent.exit(start.allocation_id, 0)
    assert await trial_states(api, exp_id) == {running: "STATE_CANCELED", queued: "STATE_CANCELED"}
    assert await exp_state(api, exp_id) == "STATE_CANCELED"
    with pytest.raises(TimeoutError):  # nothing was killed, nothing new started
        await agent.next_message(timeout=1.0)


async def test_cancel_of_a_trial_that_finishes_first_completes_it_and_kill_still_kills(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id, start = await started_trial(api, agent, ONE)
    trial_id = int(start.env["DET_TRIAL_ID"])
    await api.post(f"/api/v1/experiments/{exp_id}/cancel")
    await agent.exit(start.allocation_id, 0)  # exit 0 without acknowledging: its work was done
    assert await trial_states(api, exp_id) == {trial_id: "STATE_COMPLETED"}
    assert await exp_state(api, exp_id) == "STATE_CANCELED"
    assert (await api.post(f"/api/v1/experiments/{exp_id}/cancel")).status_code == 200  # ended: no change
    # Kill after cancel: the trial is killed at once.
    exp_id, start = await started_trial(api, agent, ONE)
    await api.post(f"/api/v1/experiments/{exp_id}/cancel")
    await api.post(f"/api/v1/experiments/{exp_id}/kill")
    assert await exp_state(api, exp_id) == "STATE_STOPPING_KILLED"
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id
    await agent.exit(start.allocation_id, 137)
    assert await exp_state(api, exp_id) == "STATE_CANCELED"


async def test_cancel_of_a_paused_experiment_ends_it_at_once(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id, start = await started_trial(api, agent, ONE)
    await api.post(f"/api/v1/experiments/{exp_id}/pause")
    await api.post(f"/api/v1/allocations/{start.allocation_id}/signals/ack_preemption",
                   headers=task_headers(start.session_token))
    await agent.exit(start.allocation_id, 0)
    assert await exp_state(api, exp_id) == "STATE_PAUSED"
    await api.post(f"/api/v1/experiments/{exp_id}/cancel")
    assert await exp_state(api, exp_id) == "STATE_CANCELED"
    assert set((await trial_states(api, exp_id)).values()) == {"STATE_CANCELED"}


async def test_a_user_killing_the_only_trial_cancels_the_experiment(api):
    agent, start, trial_id = await one_running_trial(api)
    exp_id = int(start.env["DET_EXPERIMENT_ID"])
    assert (await api.post(f"/api/v1/trials/{trial_id}/kill")).status_code == 200
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask)
    await agent.exit(start.allocation_id, 137)
    assert await trial_states(api, exp_id) == {trial_id: "STATE_CANCELED"}
    assert await exp_state(api, exp_id) == "STATE_CANCELED"  # not ERROR: a user's cancel is no failure


@pytest.mark.parametrize("kill", ["experiment", "trial"])
async def test_a_kill_between_start_task_and_task_started_stops_the_trial(api, kill):
    # The trial is QUEUED but placed: its StartTask is out and the agent's TaskStarted not yet in.
    # Before, `det e kill` answered 409 "illegal transition QUEUED -> STOPPING_KILLED".
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})  # type: ignore[dict-item]
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask), start
    trial_id = int(start.env["DET_TRIAL_ID"])
    path = f"/api/v1/experiments/{exp_id}/kill" if kill == "experiment" else f"/api/v1/trials/{trial_id}/kill"
    r = await api.post(path)
    assert r.status_code == 200, r.text
    killed = await agent.next_message()
    assert isinstance(killed, wire.KillTask) and killed.allocation_id == start.allocation_id
    await agent.start(start)  # the start it had sent already arrives after the kill
    await agent.exit(start.allocation_id, 137)
    assert await trial_states(api, exp_id) == {trial_id: "STATE_CANCELED"}
    assert await exp_state(api, exp_id) == "STATE_CANCELED"
