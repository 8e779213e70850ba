"""Metric reports: batched and single, NaN/Inf, validation, reading them back."""

from __future__ import annotations

from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_trial_lifecycle import task_headers


async def running_trial(api):  # noqa: ANN001, ANN201
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
    assert (await api.post(f"/api/v1/trials/{tid}/progress", json={"progress": 0.5, "is_raw": True}, headers=h)).status_code == 200
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
