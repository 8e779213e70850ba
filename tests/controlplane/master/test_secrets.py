"""Secrets in an experiment's config (checkpoint_storage keys, credentials in environment variables)
never come back in an API answer or a master log line; the task still gets them in its own
StartTask; and a task token reads only its own experiment's checkpoints."""

from __future__ import annotations

import logging
import uuid
from typing import cast

import pytest
import yaml

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent
from tests.controlplane.master.test_task_tokens import task_headers

SECRETS = ("TOPSECRET-KEY-123", "AKIA-ACCESS-456", "ENVSECRET-789", "REGISTRY-PW-000")
ONE_TRIAL = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}
SECRET_CONFIG = {
    **ONE_TRIAL,
    "checkpoint_storage": {"type": "s3", "bucket": "team-bucket", "access_key": SECRETS[1],
                           "secret_key": SECRETS[0], "endpoint_url": "http://127.0.0.1:9"},
    "environment": {"environment_variables": [f"AWS_SECRET_ACCESS_KEY={SECRETS[2]}", "PYTHONUNBUFFERED=1"],
                    "registry_auth": {"username": "me", "password": SECRETS[3]}},
}
# As a user writes it: comments, block style, a flow-style list.
SECRET_YAML = yaml.safe_dump(SECRET_CONFIG, sort_keys=False).replace(
    "checkpoint_storage:", "# where checkpoints go\ncheckpoint_storage:  # team bucket")


@pytest.fixture(autouse=True)
def team_buckets(api):
    """The admin's storage choices these configs name (an experiment cannot bring a bucket of its own):
    the secrets are the admin's, and still never come back in an answer."""
    api.rt.settings.checkpoint_storage_choices = [
        {"name": "team", **SECRET_CONFIG["checkpoint_storage"]},
        {"name": "b", "type": "s3", "bucket": "b", "secret_key": SECRETS[0]}]


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


async def create(api, text: str, headers: dict | None = None):
    import base64

    files = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode(), "mtime": "0"}]
    return await api.post("/api/v1/experiments", json={"config": text, "modelDefinition": files}, headers=headers)


async def started_trial(api, agent: FakeAgent, text: str) -> tuple[int, wire.StartTask]:
    r = await create(api, text)
    assert r.status_code == 200, r.text
    assert not leaked(r.text), "create answer"
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    return r.json()["experiment"]["id"], start


async def report_checkpoint(api, start: wire.StartTask, steps: int) -> str:
    ckpt = str(uuid.uuid4())
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "state": "STATE_COMPLETED", "resources": {"state.pt": "10"},
        "metadata": {"steps_completed": steps}, "training": {}})
    assert r.status_code == 200, r.text
    return ckpt


async def test_secrets_never_appear_in_any_answer_or_log_line(api, caplog):
    caplog.set_level(logging.DEBUG)
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id, start = await started_trial(api, agent, SECRET_YAML)
    trial_id = int(start.env["DET_TRIAL_ID"])
    # The task itself still gets its credentials, through its own StartTask.
    assert SECRETS[0] in start.env["DET_EXPERIMENT_CONFIG"]
    ckpt = await report_checkpoint(api, start, 5)
    assert (await api.post("/api/v1/models", json={"name": "m"})).status_code == 200
    assert (await api.post("/api/v1/models/m/versions", json={"checkpointUuid": ckpt})).status_code == 200
    task = task_headers(start.session_token)
    answers = {
        "get": await api.get(f"/api/v1/experiments/{exp_id}"),
        "list": await api.get("/api/v1/experiments"),
        "patch": await api.patch(f"/api/v1/experiments/{exp_id}", json={"description": "d"}),
        "trials": await api.get(f"/api/v1/experiments/{exp_id}/trials"),
        "trial": await api.get(f"/api/v1/trials/{trial_id}", headers=task),
        "checkpoint": await api.get(f"/api/v1/checkpoints/{ckpt}"),
        "checkpoint as its task": await api.get(f"/api/v1/checkpoints/{ckpt}", headers=task),
        "experiment checkpoints": await api.get(f"/api/v1/experiments/{exp_id}/checkpoints"),
        "trial checkpoints": await api.get(f"/api/v1/trials/{trial_id}/checkpoints", headers=task),
        "model versions": await api.get("/api/v1/models/m/versions"),
        "model version": await api.get("/api/v1/models/m/versions/1"),
        "jobs": await api.get("/api/v1/job-queues-v2"),
        "tasks": await api.get("/api/v1/tasks"),
    }
    for what, r in answers.items():
        assert r.status_code == 200, (what, r.text)
        assert not leaked(r.text), f"{what} answer leaks {leaked(r.text)}"
    exp = answers["get"].json()
    assert exp["config"]["checkpoint_storage"]["secret_key"] == "********"
    assert exp["experiment"]["config"]["checkpoint_storage"]["access_key"] == "********"
    assert "AWS_SECRET_ACCESS_KEY=********" in exp["config"]["environment"]["environment_variables"]
    original = exp["experiment"]["originalConfig"]
    assert "# where checkpoints go" in original  # the user's text, comments kept, values masked
    assert yaml.safe_load(original)["checkpoint_storage"]["secret_key"] == "********"
    assert exp["config"]["checkpoint_storage"]["bucket"] == "team-bucket"  # only secrets are masked
    training = answers["checkpoint"].json()["checkpoint"]["training"]
    assert training["experimentConfig"]["checkpoint_storage"]["secret_key"] == "********"
    assert not leaked(caplog.text), [r.name + ": " + r.getMessage()[:300]
                                     for r in caplog.records if leaked(r.getMessage())][:5]


async def test_flow_style_and_validate_only_answers_are_redacted(api):
    flow = "name: x\nentrypoint: python3 train.py\n" \
           "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n" \
           f"checkpoint_storage: {{type: s3, bucket: b, secret_key: {SECRETS[0]}}}\n"
    r = await create(api, flow)
    assert r.status_code == 200 and not leaked(r.text), r.text
    r = await api.post("/api/v1/experiments", json={"config": flow, "modelDefinition": [], "validateOnly": True})
    assert r.status_code == 200 and not leaked(r.text), r.text
    r = await api.post("/api/v1/experiments", json={"config": SECRET_CONFIG, "modelDefinition": []})  # an object
    assert r.status_code == 200 and not leaked(r.text), r.text


async def test_a_task_token_reads_only_its_own_experiments_checkpoints(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    _, start_a = await started_trial(api, agent, yaml.safe_dump(ONE_TRIAL))
    _, start_b = await started_trial(api, agent, SECRET_YAML)
    own, theirs = await report_checkpoint(api, start_a, 1), await report_checkpoint(api, start_b, 1)
    a = task_headers(start_a.session_token)
    assert (await api.get(f"/api/v1/checkpoints/{own}", headers=a)).status_code == 200
    r = await api.get(f"/api/v1/checkpoints/{theirs}", headers=a)
    assert r.status_code == 403 and theirs in r.json()["message"] and not leaked(r.text), r.text
    r = await api.get(f"/checkpoints/{theirs}", headers=a)  # the tar.gz download
    assert r.status_code == 403, r.text
    # Nor can it report into the other trial, naming it in the body.
    r = await api.post("/api/v1/checkpoints", headers=a, json={
        "uuid": str(uuid.uuid4()), "allocationId": start_b.allocation_id, "metadata": {"steps_completed": 1}})
    assert r.status_code == 403 and "allocationId" in r.json()["message"], r.text
    r = await api.post("/api/v1/checkpoints", headers=a, json={
        "uuid": str(uuid.uuid4()), "metadata": {"steps_completed": 1},
        "training": {"trialId": int(start_b.env["DET_TRIAL_ID"])}})
    assert r.status_code == 403 and "training.trialId" in r.json()["message"], r.text
