"""Hostile input at the experiment, job, model and checkpoint routes: each answers the 4xx a client can
act on, naming the field (or the state), on SQLite and PostgreSQL; never a 500, never a traceback."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.controlplane.master.conftest import create_experiment
from tests.controlplane.master.test_metrics_api import running_trial

pytestmark = pytest.mark.both_databases  # NUL bytes and 64-bit limits reach the database differently

BIG = 2**70
NUL = "a\x00b"


def raw(text: str) -> bytes:
    return text.encode()


def cases(exp_id: int, trial_id: int, job_id: str) -> list[tuple[str, str, Any, int, str]]:
    """(method, url, body: JSON value or raw bytes, status, what the message must name)."""
    e = f"/api/v1/experiments/{exp_id}"
    new = str(uuid.uuid4())
    return [
        # Bodies that are no JSON object, or none at all.
        ("POST", "/api/v1/experiments", [], 400, "request body: must be a JSON object"),
        ("POST", "/api/v1/experiments", 5, 400, "request body: must be a JSON object"),
        ("POST", "/api/v1/experiments", raw(""), 400, "request body: required"),
        ("POST", "/api/v1/experiments", raw("{bad"), 400, "request body: JSON is malformed"),
        ("PATCH", e, raw('{"resources": {"weight": NaN}}'), 400, "request body: JSON is malformed"),
        ("PATCH", e, raw('{"resources": {"weight": 1e999}}'), 400, "request body: Number out of range"),
        ("POST", "/api/v1/job-queues", "updates", 400, "request body: must be a JSON object"),
        # Wrong JSON types.
        ("POST", "/api/v1/experiments", {"config": 5}, 400, "config"),
        ("POST", "/api/v1/experiments", {"config": "name: e\x7f\x1d"}, 400, "config"),
        ("POST", "/api/v1/experiments", {"config": "name: x", "modelDefinition": "x"}, 400, "modelDefinition"),
        ("POST", "/api/v1/experiments", {"config": "name: x", "activate": "yes"}, 400, "activate"),
        ("PATCH", e, {"resources": {"weight": "nan"}}, 400, "resources.weight"),
        ("PATCH", e, {"labels": "x"}, 400, "labels"),
        ("POST", "/api/v1/job-queues", {"updates": "x"}, 400, "updates"),
        ("POST", "/api/v1/job-queues", {"updates": []}, 400, "updates"),
        ("POST", "/api/v1/job-queues", {"updates": [{"priority": 3}]}, 400, "updates[0].jobId: required"),
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": job_id, "weight": -1}]}, 400, "updates[0].weight"),
        ("DELETE", "/api/v1/checkpoints", {}, 400, "checkpointUuids: required"),
        ("DELETE", "/api/v1/checkpoints", {"checkpointUuids": "x"}, 400, "checkpointUuids"),
        ("POST", "/api/v1/models", {"name": "x", "metadata": [1]}, 400, "metadata"),
        ("POST", "/api/v1/models", {"name": 5}, 400, "name"),
        # Integers beyond 64 bits, or beyond the column, in paths, queries and bodies.
        ("GET", f"/api/v1/experiments/{BIG}", None, 400, "exp_id"),
        ("GET", f"/api/v1/experiments/{2**40}", None, 400, "exp_id"),
        ("POST", f"/api/v1/experiments/{BIG}/pause", None, 400, "exp_id"),
        ("GET", f"/api/v1/trials/{BIG}", None, 400, "trial_id"),
        ("GET", f"/api/v1/experiments?limit={BIG}", None, 400, "limit"),
        ("GET", f"/api/v1/experiments?offset={BIG}", None, 400, "offset"),
        ("GET", f"{e}/trials?limit={BIG}", None, 400, "limit"),
        ("GET", f"{e}/checkpoints?offset={BIG}", None, 400, "offset"),
        ("GET", f"{e}/checkpoints?sortByAttr=a%00b", None, 400, "sortByAttr"),
        ("GET", f"/api/v1/job-queues-v2?limit={BIG}", None, 400, "limit"),
        ("GET", f"/api/v1/models?id={BIG}", None, 400, "id"),
        ("GET", f"/api/v1/models?offset={BIG}", None, 400, "offset"),
        ("GET", f"/api/v1/models/m/versions/{BIG}", None, 400, "number"),
        ("GET", f"/api/v1/models/{BIG}", None, 404, "not found"),
        ("POST", "/api/v1/experiments", {"config": "name: x", "parentId": BIG}, 400, "parentId"),
        ("PATCH", e, {"resources": {"maxSlots": BIG}}, 400, "resources.maxSlots"),
        ("PATCH", e, {"resources": {"priority": BIG}}, 400, "resources.priority"),
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": job_id, "priority": BIG}]}, 400,
         "updates[0].priority"),
        ("POST", "/api/v1/models", {"name": "x", "metadata": {"a": BIG}}, 400, "metadata.a"),
        # Negative offsets and pages past the maximum.
        ("GET", "/api/v1/experiments?offset=-1", None, 400, "offset"),
        ("GET", "/api/v1/experiments?limit=5000", None, 400, "limit"),
        ("GET", f"{e}/trials?offset=-5", None, 400, "offset"),
        ("GET", "/api/v1/job-queues-v2?offset=-1", None, 400, "offset"),
        ("GET", f"/api/v1/trials/{trial_id}/checkpoints?limit=-1", None, 400, "limit"),
        # NUL bytes (PostgreSQL refuses them in text).
        ("PATCH", e, {"name": NUL}, 400, "name"),
        ("PATCH", e, {"labels": [NUL]}, 400, "labels[0]"),
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": NUL, "priority": 3}]}, 400, "updates[0].jobId"),
        ("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [NUL]}, 400, "checkpointUuids[0]"),
        ("GET", "/api/v1/checkpoints/a%00b", None, 400, "ckpt_uuid"),
        ("GET", "/checkpoints/a%00b", None, 400, "ckpt_uuid"),
        ("GET", "/api/v1/experiments?users=a%00b", None, 400, "users"),
        ("GET", "/api/v1/job-queues-v2?resourcePool=a%00b", None, 400, "resourcePool"),
        ("GET", "/api/v1/models?name=a%00b", None, 400, "name"),
        ("GET", "/api/v1/models/a%00b", None, 400, "name"),
        ("GET", "/api/v1/tasks/a%00b/context_directory", None, 400, "task_id"),
        ("POST", "/api/v1/models", {"name": NUL}, 400, "name"),
        ("POST", "/api/v1/models", {"name": "x", "metadata": {"a": NUL}}, 400, "metadata.a"),
        ("POST", "/api/v1/models", {"name": "x", "description": NUL}, 400, "description"),
        # Unknown ids stay 404.
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": "nope-nope", "priority": 3}]}, 404, "updates[0].jobId"),
        # A job id prefix under 8 characters names no job for sure.
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": "nope", "priority": 3}]}, 400, "updates[0].jobId"),
        ("POST", "/api/v1/job-queues", {"updates": [{"jobId": str(2**40), "priority": 3}]}, 404, "updates[0].jobId"),
        ("GET", f"/api/v1/checkpoints/{new}", None, 404, new),
    ]


def report_cases() -> list[tuple[dict, str]]:
    """Checkpoint reports (with the task's token) and the field each must name."""
    u = str(uuid.uuid4())
    return [
        ({"uuid": 5}, "uuid"),
        ({"uuid": NUL}, "uuid"),
        ({"uuid": u, "metadata": []}, "metadata"),
        ({"uuid": u, "metadata": {"steps_completed": BIG}}, "metadata.steps_completed"),
        ({"uuid": u, "metadata": {"steps_completed": "x"}}, "metadata.steps_completed"),
        ({"uuid": u, "metadata": {"steps_completed": 1, "note": NUL}}, "metadata.note"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "resources": "x"}, "resources"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "resources": {"a": BIG}}, "resources"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "resources": {"a": "-1"}}, "resources"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "reportTime": 5}, "reportTime"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "reportTime": "yesterday"}, "reportTime"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "training": {"trialId": BIG}}, "training.trialId"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "allocationId": NUL}, "allocationId"),
        ({"uuid": u, "metadata": {"steps_completed": 1}, "state": "STATE_HAPPY"}, "state"),
    ]


def _send(api, method: str, url: str, body: Any):
    if isinstance(body, bytes):
        return api.request(method, url, content=body)
    if body is None:
        return api.request(method, url)
    return api.request(method, url, content=json.dumps(body).encode())


async def test_hostile_inputs_answer_4xx_naming_the_field(api):
    exp_id, trial_id, _ = await running_trial(api)
    job_id = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["jobId"]
    failures = []
    for method, url, body, status, needle in cases(exp_id, trial_id, job_id):
        r = await _send(api, method, url, body)
        message = r.json().get("message", "") if r.headers.get("content-type", "").startswith("application/json") \
            else r.text
        if r.status_code != status or needle not in message or "Traceback" in r.text:
            failures.append(f"{method} {url} {str(body)[:60]}: {r.status_code} {message[:200]}")
    assert not failures, "\n".join(failures)
    # Nothing of it landed.
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["name"] == "unit" and exp["labels"] == []
    assert len((await api.get("/api/v1/experiments")).json()["experiments"]) == 1


async def test_hostile_checkpoint_reports_answer_400_naming_the_field(api):
    _, _, task = await running_trial(api)
    failures = []
    for body, needle in report_cases():
        r = await api.post("/api/v1/checkpoints", content=json.dumps(body).encode(), headers=task)
        if r.status_code != 400 or needle not in r.json()["message"]:
            failures.append(f"{str(body)[:80]}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert (await api.get("/api/v1/experiments/1/checkpoints")).json()["checkpoints"] == []


@pytest.mark.parametrize("verb", ["pause", "activate"])
async def test_pause_or_activate_of_a_finished_experiment_is_409_naming_its_state(api, verb):
    exp_id = await create_experiment(api)
    assert (await api.post(f"/api/v1/experiments/{exp_id}/kill")).status_code == 200
    r = await api.post(f"/api/v1/experiments/{exp_id}/{verb}")
    assert r.status_code == 409, r.text
    assert "state" in r.json()["message"] and "CANCELED" in r.json()["message"]
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["state"] == "STATE_CANCELED"
    assert (await api.post(f"/api/v1/experiments/{exp_id}/kill")).status_code == 200  # killing it again: a no-op
