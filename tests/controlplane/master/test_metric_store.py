"""The metric insert path (one statement per batch, values encoded once): what it stores reads back
the same on both databases, a report time with an offset is stored as its UTC instant, a batch
that repeats part of an earlier one stores only the new rows, and concurrent batches into several
trials all land (SQLite writers take turns; PostgreSQL writers wait for a write slot)."""

from __future__ import annotations

import asyncio

import pytest

from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_metrics_api import report
from tests.controlplane.master.test_trial_lifecycle import task_headers

pytestmark = pytest.mark.both_databases  # the ingest path: one statement per batch, per dialect


async def test_values_read_back_and_times_are_stored_in_utc(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    await create_experiment(api)
    start = await agent.next_message()
    await agent.start(start)
    tid, h = int(start.env["DET_TRIAL_ID"]), task_headers(start.session_token)
    values = {"loss": 0.125, "name": "ünïcode ✓", "flag": True, "none": None, "list": [1, [2.5, "x"]],
              "nan": "NaN"}
    first = report("training", 1, values) | {"reportTime": "2024-03-01T12:00:00+02:00"}
    first["metrics"]["batchMetrics"] = [{"loss": 1.0}, {"loss": 0.5}]
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": [first]}, headers=h)
    assert r.status_code == 200, r.text
    # a retry of step 1 with step 2 beside it: only step 2 is new
    again = {"reports": [report("training", 1, {"loss": 9.0}), report("training", 2, {"loss": 0.1})]}
    assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=again, headers=h)).status_code == 200
    rows = (await api.get(f"/api/v1/trials/{tid}/metrics?group=training")).json()["metrics"]
    assert [m["stepsCompleted"] for m in rows] == [1, 2]
    assert rows[0]["metrics"] == values
    assert rows[0]["reportTime"].startswith("2024-03-01T10:00:00")
    assert rows[1]["metrics"] == {"loss": 0.1} and rows[1]["reportTime"]


async def test_concurrent_batches_into_many_trials_all_land(api):
    n = 6
    agent = FakeAgent(api.rt, slots=n)
    await agent.register()
    config = {"name": "many", "entrypoint": "python3 train.py",
              "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
              "searcher": {"name": "random", "metric": "loss", "max_trials": n, "max_concurrent_trials": n,
                           "max_length": {"batches": 10}}}
    await create_experiment(api, config)
    starts = [await agent.next_message() for _ in range(n)]
    for s in starts:
        await agent.start(s)

    async def post(s, k: int) -> int:
        body = {"reports": [report("training", k * 10 + i, {"loss": 1.0}) for i in range(10)]}
        r = await api.post(f"/api/v1/trials/{s.env['DET_TRIAL_ID']}/metrics/batch", json=body,
                           headers=task_headers(s.session_token))
        return r.status_code

    codes = await asyncio.gather(*(post(s, k) for s in starts for k in range(5)))
    assert set(codes) == {200}
    for s in starts:
        page = (await api.get(f"/api/v1/trials/{s.env['DET_TRIAL_ID']}/metrics")).json()
        assert page["pagination"]["total"] == 50
