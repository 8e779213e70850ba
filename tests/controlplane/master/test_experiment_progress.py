"""Experiment progress as `det experiment list/describe` and `GET /api/v1/experiments(/id)` show it:
the searcher's completed units over its total, moving as trials report, and an experiment that
ends in ERROR keeps what it reached."""

from __future__ import annotations

import pytest

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_allocations_rendezvous import task_headers

pytestmark = pytest.mark.both_databases  # progress is aggregated in SQL


async def report_batches(api, start: wire.StartTask, steps: int) -> None:
    body = {"group": "training", "metrics": {"stepsCompleted": steps, "metrics": {"avgMetrics": {"loss": 1.0}}}}
    r = await api.post(f"/api/v1/trials/{start.env['DET_TRIAL_ID']}/metrics", json=body,
                       headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text


async def report_fraction(api, start: wire.StartTask, fraction: float) -> None:
    r = await api.post(f"/api/v1/trials/{start.env['DET_TRIAL_ID']}/progress",
                       json={"progress": fraction, "isRaw": True}, headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text


async def shown(api, exp_id: int) -> float:
    """The progress every answer shows, after checking they agree."""
    one = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["progress"]
    listed = {e["id"]: e["progress"] for e in (await api.get("/api/v1/experiments")).json()["experiments"]}
    assert listed[exp_id] == one
    jobs = {int(j["full"]["entityId"]): j["full"]["progress"]
            for j in (await api.get("/api/v1/job-queues-v2")).json()["jobs"]}
    assert jobs.get(exp_id, one) == one
    return one


async def test_progress_moves_as_trials_report(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api)  # random: 2 trials of 10 batches
    first, second = await agent.next_message(), await agent.next_message()
    await agent.start(first)
    await agent.start(second)
    assert await shown(api, exp_id) == 0.0
    await report_batches(api, first, 5)
    assert await shown(api, exp_id) == pytest.approx(5 / 20)
    await report_fraction(api, second, 0.5)  # its own report counts where batches say less
    assert await shown(api, exp_id) == pytest.approx(10 / 20)
    await report_batches(api, first, 10)
    assert await shown(api, exp_id) == pytest.approx(15 / 20)
    await agent.exit(first.allocation_id, 0)
    await agent.exit(second.allocation_id, 0)
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == 1.0


async def test_an_errored_experiment_keeps_the_progress_it_reached(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "name": "single", "max_trials": 1}, "max_restarts": 0}
    exp_id = await create_experiment(api, config)
    start = await agent.next_message()
    await agent.start(start)
    await report_batches(api, start, 3)
    await agent.exit(start.allocation_id, 1)
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_ERROR"
    assert await shown(api, exp_id) == pytest.approx(0.3)  # not 100 %


async def test_a_restarted_trial_resumes_its_count(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "name": "single", "max_trials": 1}}
    exp_id = await create_experiment(api, config)
    start = await agent.next_message()
    await agent.start(start)
    await report_batches(api, start, 4)
    await agent.exit(start.allocation_id, 1)  # a failure within max_restarts: it comes back
    assert await shown(api, exp_id) == pytest.approx(0.4)
    again = await agent.next_message()
    await agent.start(again)
    await report_batches(api, again, 8)
    assert await shown(api, exp_id) == pytest.approx(0.8)


async def test_a_config_this_version_cannot_read_does_not_fail_the_listing(api):
    from sqlalchemy import update

    from controlplane.master.db.models import Experiment

    exp_id = await create_experiment(api)
    async with api.rt.sessions.begin() as session:  # last saved by an older master: no progress basis
        await session.execute(update(Experiment).where(Experiment.id == exp_id).values(
            config={"searcher": {"name": "retired"}}, progress=0.4, progress_basis=None))
    r = await api.get("/api/v1/experiments")
    assert r.status_code == 200, r.text
    assert [e["progress"] for e in r.json()["experiments"]] == [0.4]  # the one stored at its last event
