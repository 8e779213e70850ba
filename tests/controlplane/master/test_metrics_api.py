"""Metric reports: batched and single, NaN/Inf, validation, reading them back."""

from __future__ import annotations

import pytest

from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_trial_lifecycle import task_headers

pytestmark = pytest.mark.both_databases  # the ingest path, NaN/Inf and NUL values, pages


async def running_trial(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api)
    start = await agent.next_message()
    await agent.start(start)
    return exp_id, int(start.env["DET_TRIAL_ID"]), task_headers(start.session_token)


def report(group: str, steps: int, metrics: dict) -> dict:
    return {"group": group, "stepsCompleted": steps, "trialRunId": 1, "reportTime": None,
            "metrics": {"avgMetrics": metrics, "batchMetrics": None}}


async def test_batch_is_stored_and_read_back(api):
    exp_id, tid, h = await running_trial(api)
    reports = [report("training", i, {"loss": 1.0 / i}) for i in range(1, 101)]
    reports.append(report("validation", 100, {"loss": 0.25, "acc": "NaN", "big": "Infinity"}))
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": reports}, headers=h)
    assert r.status_code == 200, r.text
    training = (await api.get(f"/api/v1/trials/{tid}/metrics?group=training")).json()["metrics"]
    assert [m["stepsCompleted"] for m in training] == list(range(1, 101))
    validation = (await api.get(f"/api/v1/trials/{tid}/metrics?group=validation")).json()["metrics"]
    assert validation[0]["metrics"] == {"loss": 0.25, "acc": "NaN", "big": "Infinity"}
    trial = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert trial["totalBatchesProcessed"] == 100 and trial["searcherMetricValue"] == 0.25
    best = await api.get(f"/api/v1/experiments/{exp_id}/searcher/best_searcher_validation_metric")
    assert best.json() == {"metric": 0.25}
    workloads = (await api.get(f"/api/v1/trials/{tid}/workloads")).json()["workloads"]
    assert len(workloads) == 101 and "validation" in workloads[-1]


async def test_a_trial_shows_its_best_and_latest_validation_across_batches(api):
    """The best is the first report of the best value (a later tie does not replace it), found
    without reading the trial's other validations; the latest is the highest step."""
    exp_id, tid, h = await running_trial(api)
    batches = [[report("validation", 10, {"loss": 0.5}), report("validation", 20, {"loss": 0.3})],
               [report("validation", 30, {"loss": "NaN"}), report("validation", 40, {"loss": 0.3})],
               [report("validation", 50, {"loss": 0.4})]]
    for reports in batches:
        r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": reports}, headers=h)
        assert r.status_code == 200, r.text
    trial = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert trial["bestValidation"]["totalBatches"] == 20 and trial["bestValidation"]["searcherMetric"] == 0.3
    assert trial["latestValidation"]["totalBatches"] == 50
    listed = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    ours = next(t for t in listed if t["id"] == tid)
    assert (ours["bestValidation"]["totalBatches"], ours["latestValidation"]["totalBatches"]) == (20, 50)
    assert all("bestValidation" not in t for t in listed if t["id"] != tid)  # the other trial reported nothing


async def test_malformed_batch_stores_nothing(api):
    _, tid, h = await running_trial(api)
    reports = [report("training", 1, {"loss": 1.0}), report("training", -3, {"loss": 1.0})]
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": reports}, headers=h)
    assert r.status_code == 400
    assert "reports[1].stepsCompleted: Expected `int` >= 0" in r.json()["message"]
    assert (await api.get(f"/api/v1/trials/{tid}/metrics")).json()["metrics"] == []
    for bad, needle in (({"reports": "x"}, "reports"), ({"reports": [{"group": "a.b"}]}, "group"),
                        ({"reports": [report("validation", 1, {"loss": None})]}, "cannot be null")):
        r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=bad, headers=h)
        assert r.status_code == 400 and needle in r.json()["message"], r.text
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", content=b"{not json", headers=h)
    assert r.status_code == 400, r.text


async def test_single_report_in_determined_shape(api):
    _, tid, h = await running_trial(api)
    body = {"group": "validation", "metrics": {"trialId": tid, "trialRunId": 1, "stepsCompleted": 10,
                                               "reportTime": None, "metrics": {"avgMetrics": {"loss": 0.5}}}}
    assert (await api.post(f"/api/v1/trials/{tid}/metrics", json=body, headers=h)).status_code == 200
    r = await api.post(f"/api/v1/trials/{tid}/progress", json={"progress": 0.5, "isRaw": True}, headers=h)
    assert r.status_code == 200
    r = await api.post(f"/api/v1/trials/{tid}/progress", json={"progress": 3}, headers=h)
    assert r.status_code == 400 and "progress" in r.json()["message"]
    trial = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert trial["progress"] == 0.5 and trial["latestValidation"]["totalBatches"] == 10


async def test_a_retried_report_is_stored_once(api):
    _, tid, h = await running_trial(api)
    body = {"reports": [report("training", 5, {"loss": 1.0}), report("validation", 5, {"loss": 0.9})]}
    for _ in range(2):  # the first 200 was "lost": the client sends it again
        assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=h)).status_code == 200
    assert len((await api.get(f"/api/v1/trials/{tid}/metrics")).json()["metrics"]) == 2


async def _all_pages(api, path: str, key: str, **params) -> tuple[list[dict], int]:
    """Follows nextCursor; returns every row and the number of pages."""
    rows, pages, cursor = [], 0, None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await api.get(path, params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        page = body["pagination"]
        assert page["startIndex"] == len(rows) and page["endIndex"] == len(rows) + len(body[key])
        rows += body[key]
        pages += 1
        cursor = body.get("nextCursor")
        if cursor is None:
            return rows, pages


async def test_metrics_pages_return_every_row_exactly_once(api):
    _, tid, h = await running_trial(api)
    # Three groups; every training step twice (run 1 by the task, then run 0 by the trial's owner),
    # so the order within a step (row id) matters.
    task_reports = [report("training", i, {"loss": i}) for i in range(1250)]
    task_reports += [report("validation", i, {"loss": i}) for i in range(300)]
    task_reports += [report("custom", i, {"x": i}) for i in range(10)]
    owner_reports = [{**report("training", i, {"loss": -i}), "trialRunId": 0} for i in range(1250)]
    for body, headers in (({"reports": task_reports}, h), ({"reports": owner_reports}, {})):
        assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=headers)).status_code == 200
    stored = 2500 + 300 + 10
    path = f"/api/v1/trials/{tid}/metrics"
    training, pages = await _all_pages(api, path, "metrics", group="training", limit=300)
    assert [(m["stepsCompleted"], m["trialRunId"]) for m in training] == [(i, r) for i in range(1250) for r in (1, 0)]
    assert pages == 9
    everything, pages = await _all_pages(api, path, "metrics", limit=700)
    assert len(everything) == stored and pages == 5
    assert [m["group"] for m in everything] == ["custom"] * 10 + ["training"] * 2500 + ["validation"] * 300
    keys = [(m["group"], m["stepsCompleted"], m["trialRunId"]) for m in everything]
    assert len(set(keys)) == len(keys)
    first = (await api.get(path, params={"limit": 700})).json()
    assert first["pagination"] == {"offset": 0, "limit": 700, "startIndex": 0, "endIndex": 700, "total": stored}
    by_offset = (await api.get(path, params={"offset": 1255, "limit": 10})).json()["metrics"]
    assert by_offset == everything[1255:1265]
    assert len((await api.get(path, params={"limit": 0})).json()["metrics"]) == stored  # 0: the largest page
    assert len((await api.get(path)).json()["metrics"]) == 1000  # the default page
    r = await api.get(path, params={"offset": 5, "cursor": first["nextCursor"]})
    assert r.status_code == 400 and "offset" in r.json()["message"]
    r = await api.get(path, params={"group": "validation", "cursor": first["nextCursor"]})
    assert r.status_code == 400 and "cursor" in r.json()["message"]


async def test_workloads_page_in_step_order_across_metrics_and_checkpoints(api):
    from tests.controlplane.master.test_trial_lifecycle import report_checkpoint

    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api)
    start = await agent.next_message()
    await agent.start(start)
    tid, h = int(start.env["DET_TRIAL_ID"]), task_headers(start.session_token)
    reports = [report("training", s, {"loss": s}) for s in range(1, 41)]
    reports += [report("validation", s, {"loss": s}) for s in range(5, 41, 5)]
    reports += [report("other", 3, {"x": 1})]  # not a workload
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": reports}, headers=h)
    assert r.status_code == 200
    for steps in (10, 20, 20, 40):
        await report_checkpoint(api, start, steps)
    expected = 40 + 8 + 4
    one_page = (await api.get(f"/api/v1/trials/{tid}/workloads", params={"limit": 0})).json()
    assert one_page["pagination"]["total"] == expected and one_page["nextCursor"] is None
    order = [(kind, w[kind]["totalBatches"]) for w in one_page["workloads"] for kind in w]
    assert order == sorted(order, key=lambda o: (o[1], ["training", "validation", "checkpoint"].index(o[0])))
    paged, pages = await _all_pages(api, f"/api/v1/trials/{tid}/workloads", "workloads", limit=7)
    assert paged == one_page["workloads"] and pages == 8
    by_offset = (await api.get(f"/api/v1/trials/{tid}/workloads", params={"offset": 20, "limit": 5})).json()
    assert by_offset["workloads"] == one_page["workloads"][20:25]


async def test_a_nul_inside_a_metric_value_round_trips(api):
    _, tid, h = await running_trial(api)
    body = {"reports": [report("training", 1, {"note": "a\x00b", "batch": ["x\x00"]})]}
    assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=h)).status_code == 200
    rows = (await api.get(f"/api/v1/trials/{tid}/metrics")).json()["metrics"]
    assert rows[0]["metrics"] == {"note": "a\x00b", "batch": ["x\x00"]}


async def test_trials_from_before_migration_0008_get_their_best_validation_backfilled(api):
    """Migration 0008 finds the best validation of trials that reported before it existed."""
    import importlib.util

    from sqlalchemy import update

    from controlplane.master.db.migrate import MIGRATIONS
    from controlplane.master.db.models import Trial

    spec = importlib.util.spec_from_file_location("m0008", MIGRATIONS / "versions" / "0008_best_validation_steps.py")
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    _, tid, h = await running_trial(api)
    reports = [report("validation", 10, {"loss": 0.5}), report("validation", 20, {"loss": 0.2}),
               report("validation", 30, {"loss": 0.2}), report("validation", 40, {"loss": 0.9})]
    r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": reports}, headers=h)
    assert r.status_code == 200
    async with api.rt.engine.begin() as conn:  # as a trial that reported before 0008 would be
        await conn.execute(update(Trial).values(best_validation_steps=None))
        await conn.run_sync(migration.backfill)
    async with api.rt.sessions() as session:
        assert (await session.get(Trial, tid)).best_validation_steps == 20
    trial = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert trial["bestValidation"]["totalBatches"] == 20
