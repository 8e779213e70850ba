"""Task metric batches are committed in groups (services/metric_writer.py): many trials' batches in
one transaction, each still fenced by its own run, and one refused batch never fails another."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from controlplane.master.db.models import Trial
from controlplane.master.errors import Conflict
from controlplane.master.principals import TaskPrincipal
from controlplane.master.services import metric_writer
from controlplane.master.services import metrics as metric_svc
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # the ingest path: grouped transactions, per dialect

TRIALS = 4
FOUR = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": TRIALS,
                               "max_concurrent_trials": TRIALS}}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def running_trials(api, n: int = TRIALS) -> list[wire.StartTask]:
    agent = FakeAgent(api.rt, slots=n)
    await agent.register()
    await create_experiment(api, FOUR)
    starts = []
    for _ in range(n):
        msg = await agent.next_message()
        assert isinstance(msg, wire.StartTask)
        await agent.start(msg)
        starts.append(msg)
    return starts


def batch(first_step: int, rows: int, group: str = "training", loss=lambda s: 1.0 / s) -> dict:
    return {"reports": [{"group": group, "stepsCompleted": s, "metrics": {"avgMetrics": {"loss": loss(s)}}}
                        for s in range(first_step, first_step + rows)]}


async def test_concurrent_batches_of_many_trials_are_all_stored_with_their_trials_maxima(api):
    starts = await running_trials(api)
    posts = []
    for i, start in enumerate(starts):
        trial, h = start.env["DET_TRIAL_ID"], task_headers(start.session_token)
        for k in range(5):  # five batches per trial in flight at once: same-trial batches go in turn
            posts.append(api.post(f"/api/v1/trials/{trial}/metrics/batch", json=batch(1 + 10 * k, 10), headers=h))
        # validations with a best in the middle: loss is smallest at step 3 + i
        posts.append(api.post(f"/api/v1/trials/{trial}/metrics/batch", headers=h, json=batch(
            1, 6, group="validation", loss=lambda s, best=3 + i: abs(s - best) + 0.5)))
    answers = await asyncio.gather(*posts)
    assert [r.status_code for r in answers] == [200] * len(posts), [r.text for r in answers if r.status_code != 200]
    for i, start in enumerate(starts):
        trial = int(start.env["DET_TRIAL_ID"])
        page = (await api.get(f"/api/v1/trials/{trial}/metrics?group=training&limit=100")).json()
        assert [m["stepsCompleted"] for m in page["metrics"]] == list(range(1, 51))
        async with api.rt.sessions() as session:
            row = await session.get(Trial, trial)
        assert (row.total_batches, row.searcher_metric_value, row.best_validation_steps) == (50, 0.5, 3 + i)


async def test_a_refused_batch_in_a_group_fails_alone(api):
    starts = await running_trials(api, 2)
    good, other = starts
    trial, other_trial = int(good.env["DET_TRIAL_ID"]), int(other.env["DET_TRIAL_ID"])
    principal = TaskPrincipal(good.allocation_id, good.task_id, trial, 1)
    stale = TaskPrincipal(other.allocation_id, other.task_id, other_trial, 7)  # not the trial's run
    foreign = TaskPrincipal(other.allocation_id, other.task_id, other_trial, 1)  # its allocation, not its trial

    def rows(t: int) -> metric_writer.RowsFor:
        return metric_writer.RowsFor(t, 1, [metric_svc.Report("training", 9, None, None, {"loss": 1.0}, None)])

    results = await asyncio.gather(
        api.rt.metric_writer.write(principal, rows(trial), metric_writer.TrialUpdate(max_steps=9)),
        api.rt.metric_writer.write(stale, rows(other_trial), metric_writer.TrialUpdate(max_steps=9)),
        api.rt.metric_writer.write(foreign, rows(trial + 1000), metric_writer.TrialUpdate(max_steps=9)),
        return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], Conflict) and "run 7" in str(results[1])
    assert "not found" in str(results[2])
    stored = (await api.get(f"/api/v1/trials/{trial}/metrics")).json()["metrics"]
    assert [m["stepsCompleted"] for m in stored] == [9]
    assert (await api.get(f"/api/v1/trials/{other_trial}/metrics")).json()["metrics"] == []


async def test_a_group_that_fails_as_a_whole_is_stored_batch_by_batch(api, monkeypatch):
    starts = await running_trials(api, 3)
    real_insert = metric_writer.insert_rows
    failed_groups = []

    async def insert_fails_for_groups(session, batches, now):
        if len(batches) > 1:
            failed_groups.append(len(batches))
            raise RuntimeError("connection lost mid-group")
        await real_insert(session, batches, now)

    monkeypatch.setattr(metric_writer, "insert_rows", insert_fails_for_groups)
    writes = []
    for s in starts:
        trial = int(s.env["DET_TRIAL_ID"])
        principal = TaskPrincipal(s.allocation_id, s.task_id, trial, 1)
        reports = [metric_svc.Report("training", k, None, None, {"loss": 1.0}, None) for k in (1, 2, 3)]
        writes.append(api.rt.metric_writer.write(principal, metric_writer.RowsFor(trial, 1, reports),
                                                 metric_writer.TrialUpdate(max_steps=3)))
    assert await asyncio.gather(*writes) == [None, None, None]  # queued together: one group of three
    assert failed_groups == [3]
    for s in starts:
        rows = (await api.get(f"/api/v1/trials/{s.env['DET_TRIAL_ID']}/metrics")).json()["metrics"]
        assert [m["stepsCompleted"] for m in rows] == [1, 2, 3]
        async with api.rt.sessions() as session:
            assert (await session.get(Trial, int(s.env["DET_TRIAL_ID"]))).total_batches == 3
