"""Hostile inputs to the trial data plane (metrics, progress, early exit, runs, task logs,
allocation signals) answer 4xx naming the field, never a 500, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.controlplane.master.test_metrics_api import report, running_trial

pytestmark = pytest.mark.both_databases  # NUL bytes and 64-bit ids reach the database differently

BIG = 2**64
def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


DEEP = {"avgMetrics": {"x": _nested(40)}}

# (method, path under the trial / allocation, body (json, or bytes sent as is), status, words the answer names)
CASES = [
    ("post", "/metrics/batch", b"[1, 2]", 400, ["object"]),
    ("post", "/metrics/batch", b"{not json", 400, []),
    ("post", "/metrics/batch", {"reports": "x"}, 400, ["reports"]),
    ("post", "/metrics/batch", {"reports": [report("a.b", 1, {})]}, 400, ["reports[0].group"]),
    ("post", "/metrics/batch", {"reports": [report("training", BIG, {})]}, 400, ["reports[0].stepsCompleted"]),
    ("post", "/metrics/batch", {"reports": [report("training", -1, {})]}, 400, ["reports[0].stepsCompleted"]),
    ("post", "/metrics/batch", {"reports": [{**report("training", 1, {}), "trialRunId": BIG}]}, 400,
     ["reports[0].trialRunId"]),
    ("post", "/metrics/batch", {"reports": [{**report("training", 1, {}), "trialRunId": 7}]}, 400,
     ["reports[0].trialRunId", "run 1"]),
    ("post", "/metrics/batch", {"reports": [{**report("training", 1, {}), "reportTime": "yesterday"}]}, 400,
     ["reports[0].reportTime"]),
    ("post", "/metrics/batch", {"reports": [report("training", 1, {"lo\x00ss": 1.0})]}, 400,
     ["reports[0].metrics.avgMetrics"]),
    ("post", "/metrics/batch", {"reports": [report("tra\x00ining", 1, {})]}, 400, ["reports[0].group"]),
    ("post", "/metrics/batch", {"reports": [report("g" * 65, 1, {})]}, 400, ["reports[0].group"]),
    ("post", "/metrics/batch", {"reports": [report("training", 1, {"loss": {"nested": 1}})]}, 400,
     ["reports[0].metrics.avgMetrics.loss", "object"]),
    ("post", "/metrics/batch", {"reports": [report("validation", 1, {"loss": None})]}, 400, ["cannot be null"]),
    ("post", "/metrics/batch", {"reports": [{**report("training", 1, {}), "metrics": DEEP}]}, 400,
     ["avgMetrics.x", "nested"]),
    ("post", "/metrics/batch", b'{"reports": [{"group": "training", "stepsCompleted": 1, "metrics": {"avgMetrics": '
     b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}}]}", 400, ["nested too deeply"]),
    ("post", "/metrics/batch", {"reports": [{**report("training", 1, {}), "metrics": {"avgMetrics": [1]}}]}, 400,
     ["reports[0].metrics.avgMetrics"]),
    ("post", "/metrics", {"metrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {}}}}, 400, ["group"]),
    ("post", "/metrics", {"group": "training", "metrics": {"stepsCompleted": [1], "metrics": {"avgMetrics": {}}}}, 400,
     ["metrics.stepsCompleted"]),
    ("post", "/training_metrics", {"trainingMetrics": 5}, 400, ["trainingMetrics"]),
    ("post", "/validation_metrics",
     {"validationMetrics": {"stepsCompleted": 1, "metrics": {"avgMetrics": {"a": None}}}},
     400, ["validationMetrics.metrics.avgMetrics.a"]),
    ("post", "/progress", {"progress": 3}, 400, ["progress"]),
    ("post", "/progress", {"progress": "half"}, 400, ["progress"]),
    ("post", "/progress", b"0.5", 400, ["object"]),
    ("post", "/runner/metadata", {"state": 5}, 400, ["state"]),
    ("post", "/runner/metadata", {"state": "tra\x00ining"}, 400, ["state"]),
    ("post", "/early_exit", {"reason": 5}, 400, ["reason"]),
    ("post", "/early_exit", {"reason": "EXITED_REASON_BORED"}, 400, ["reason"]),
    ("post", "/early_exit", {"earlyExit": {"reason": []}}, 400, ["earlyExit.reason"]),
    ("post", "/early_exit", {}, 400, ["reason"]),
    ("get", "/metrics?limit=-1", None, 400, ["limit"]),
    ("get", "/metrics?limit=10001", None, 400, ["limit"]),
    ("get", f"/metrics?offset={BIG}", None, 400, ["offset"]),
    ("get", "/metrics?offset=-5", None, 400, ["offset"]),
    ("get", "/metrics?cursor=bm90IGEgY3Vyc29y", None, 400, ["cursor"]),
    ("get", "/metrics?group=a%00b", None, 400, ["group"]),
    ("get", "/workloads?limit=-1", None, 400, ["limit"]),
    ("get", "/workloads?cursor=%5B%5D", None, 400, ["cursor"]),
    ("get", "/logs?limit=-1", None, 400, ["limit"]),
    ("get", f"/logs?limit={BIG}", None, 400, ["limit"]),
    ("get", "/logs?searchText=a%00b", None, 400, ["searchText"]),
    ("get", "/logs?orderBy=SIDEWAYS", None, 400, ["orderBy"]),
    ("get", "/logs?rankIds=-1", None, 400, ["rankIds"]),
    ("get", "/logs?levels=LOUD", None, 400, ["levels"]),
    ("get", "/logs?stdtypes=std%00out", None, 400, ["stdtypes"]),
]
TASK_LOG_CASES = [
    ({"logs": [{"log": 5}]}, 400, ["logs[0].log"]),
    ({"logs": {"log": "x"}}, 400, ["logs"]),
    ({"logs": [{"log": "x", "rankId": BIG}]}, 400, ["logs[0].rankId"]),
    ({"logs": [{"log": "x", "rankId": "zero"}]}, 400, ["logs[0].rankId"]),
    ({"logs": [{"log": "x", "timestamp": "yesterday"}]}, 400, ["logs[0].timestamp"]),
    ({"logs": [{"log": "x", "stdtype": "std\x00out"}]}, 400, ["logs[0].stdtype"]),
    ({"logs": [{"log": "x", "taskId": "t\x00"}]}, 400, ["logs[0].taskId"]),
    ({"logs": [{"log": "x", "agentId": "a" * 300}]}, 400, ["logs[0].agentId"]),
    (b"[]", 400, ["object"]),
]
ALLOCATION_CASES = [
    ("post", "/signals/ack_preemption", b"[]", 400, ["object"]),
    ("post", "/acceleratorData", {"acceleratorData": {"acceleratorUuids": [1]}}, 400,
     ["acceleratorData.acceleratorUuids"]),
    ("get", "/signals/preemption?timeout_seconds=-1", None, 400, ["timeout_seconds"]),
    ("get", "/signals/preemption?timeout_seconds=soon", None, 400, ["timeout_seconds"]),
]


async def _send(api, method: str, path: str, body, headers: dict):
    if method == "get":
        return await api.get(path, headers=headers)
    if isinstance(body, bytes):
        return await api.post(path, content=body, headers=headers)
    return await api.post(path, json=body, headers=headers)


def _check(r, status: int, words: list[str], what: str) -> None:
    assert r.status_code == status, (what, r.status_code, r.text)
    message = r.json()["message"]
    for word in words:
        assert word in message, (what, word, message)


async def test_hostile_trial_inputs_answer_4xx_naming_the_field(api):
    _, tid, h = await running_trial(api)
    for method, path, body, status, words in CASES:
        _check(await _send(api, method, f"/api/v1/trials/{tid}{path}", body, h), status, words, path)
    # Nothing of the refused reports was stored.
    assert (await api.get(f"/api/v1/trials/{tid}/metrics")).json()["metrics"] == []


async def test_hostile_task_logs_answer_400_naming_the_field(api):
    _, _, h = await running_trial(api)
    for body, status, words in TASK_LOG_CASES:
        _check(await _send(api, "post", "/api/v1/task/logs", body, h), status, words, repr(body)[:60])


async def test_hostile_allocation_inputs_answer_400(api):
    _, tid, h = await running_trial(api)
    alloc = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    task_allocation = await _allocation_of(api, tid)
    for method, path, body, status, words in ALLOCATION_CASES:
        r = await _send(api, method, f"/api/v1/allocations/{task_allocation}{path}", body, h)
        _check(r, status, words, path)
    assert alloc  # the trial is still there


async def _allocation_of(api, trial_id: int) -> str:
    from sqlalchemy import select

    from controlplane.master.db.models import Allocation

    async with api.rt.sessions() as session:
        return await session.scalar(select(Allocation.id).where(Allocation.trial_id == trial_id))


@pytest.mark.parametrize("path", ["/api/v1/trials/{big}/metrics", "/api/v1/trials/{big}/workloads",
                                  "/api/v1/trials/{big}/logs", "/api/v1/runs/{big}/metadata",
                                  "/api/v1/experiments/{big}/searcher/best_searcher_validation_metric"])
async def test_ids_beyond_64_bits_answer_400(api, path):
    r = await api.get(path.format(big=BIG))
    assert r.status_code == 400, r.text


async def test_runs_start_and_early_exit_take_typed_bodies(api):
    _, tid, h = await running_trial(api)
    for body, words in (({"runId": "one"}, ["runId"]), ({"runId": BIG}, ["runId"]), ({}, ["runId"]),
                        ({"runId": tid, "checkpointStorage": "s3"}, ["checkpointStorage"])):
        _check(await api.post("/api/v1/runs/start", json=body, headers=h), 400, words, repr(body))
    assert (await api.post("/api/v1/runs/start", json={"runId": tid}, headers=h)).json() == {"storageId": None}
    exit_ = f"/api/v1/trials/{tid}/early_exit"
    assert (await api.post(exit_, json={"reason": "EXITED_REASON_INVALID_HP"}, headers=h)).status_code == 200
    assert (await api.post(exit_, json={"reason": "EXITED_REASON_INVALID_HP"}, headers=h)).status_code == 200
    r = await api.post(exit_, json={"earlyExit": {"reason": "EXITED_REASON_USER_REQUESTED_STOP"}}, headers=h)
    assert r.status_code == 409 and "EXITED_REASON_INVALID_HP" in r.json()["message"]
