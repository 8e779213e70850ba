"""Someone else's work: a user who does not own an experiment, job, checkpoint or model gets a 403
naming it, and nothing changes (not even half of a batch, not a checkpoint's files); the owner and
an admin may."""

from __future__ import annotations

import uuid
from typing import cast

import yaml

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent
from tests.controlplane.master.test_checkpoint_gc import staged, storage_dir
from tests.controlplane.master.test_secrets import create
from tests.controlplane.master.test_task_tokens import task_headers

ONE_TRIAL = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def login(api, username: str, password: str = "") -> dict:
    r = await api.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, r.text
    return bearer(r.json()["token"])


async def add_user(api, name: str, role: str = "user") -> dict:
    admin = await login(api, "admin")
    r = await api.post("/api/v1/users", headers=admin,
                       json={"user": {"username": name, "role": role}, "password": "pw", "isHashed": False})
    assert r.status_code == 200, r.text
    return await login(api, name, "pw")


async def experiment(api, headers: dict | None = None, **changes) -> dict:
    r = await create(api, yaml.safe_dump({**ONE_TRIAL, **changes}), headers)
    assert r.status_code == 200, r.text
    return r.json()["experiment"]


async def checkpoint_on_disk(api, start: wire.StartTask, steps: int) -> str:
    """A checkpoint whose files are in the default shared_fs storage, reported by its task."""
    ckpt = str(uuid.uuid4())
    staged(api, start.allocation_id, ckpt).mkdir(parents=True)  # where the task writes; the report publishes it
    (staged(api, start.allocation_id, ckpt) / "state.pt").write_bytes(b"w" * steps)
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "state": "STATE_COMPLETED", "resources": {"state.pt": str(steps)},
        "metadata": {"steps_completed": steps}})
    assert r.status_code == 200, r.text
    return ckpt


async def running(api, agent: FakeAgent, headers: dict | None = None) -> tuple[dict, wire.StartTask]:
    exp = await experiment(api, headers)
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    return exp, start


async def test_a_non_owner_cannot_change_or_read_the_code_of_someone_elses_experiment(api):
    nora = await add_user(api, "nora")
    exp = await experiment(api, resources={"priority": 30})
    eid = exp["id"]
    refused = [
        await api.post(f"/api/v1/experiments/{eid}/pause", headers=nora),
        await api.post(f"/api/v1/experiments/{eid}/kill", headers=nora),
        await api.post(f"/api/v1/experiments/{eid}/cancel", headers=nora),
        await api.post(f"/api/v1/experiments/{eid}/activate", headers=nora),
        await api.patch(f"/api/v1/experiments/{eid}", headers=nora, json={"name": "mine now"}),
        await api.patch(f"/api/v1/experiments/{eid}", headers=nora, json={"resources": {"priority": 1}}),
        await api.get(f"/api/v1/experiments/{eid}/model_def", headers=nora),
    ]
    for r in refused:
        assert r.status_code == 403 and f"experiment {eid}" in r.json()["message"], r.text
    after = (await api.get(f"/api/v1/experiments/{eid}")).json()["experiment"]
    assert (after["state"], after["name"]) == ("STATE_ACTIVE", "unit")
    job = (await api.get("/api/v1/job-queues-v2")).json()["jobs"][0]["full"]
    assert job["priority"] == 30
    # The owner and an admin may.
    assert (await api.get(f"/api/v1/experiments/{eid}/model_def")).status_code == 200
    admin = await login(api, "admin")
    assert (await api.get(f"/api/v1/experiments/{eid}/model_def", headers=admin)).status_code == 200
    assert (await api.post(f"/api/v1/experiments/{eid}/pause", headers=admin)).status_code == 200
    assert (await api.post(f"/api/v1/experiments/{eid}/activate")).status_code == 200


async def test_a_job_queue_batch_naming_someone_elses_job_changes_nothing(api):
    nora = await add_user(api, "nora")
    theirs = await experiment(api)
    hers = await experiment(api, nora)
    r = await api.post("/api/v1/job-queues", headers=nora, json={"updates": [
        {"jobId": hers["jobId"], "priority": 10},  # her own, first: a half-applied batch would keep it
        {"jobId": theirs["jobId"], "priority": 1}]})
    assert r.status_code == 403 and theirs["jobId"] in r.json()["message"], r.text
    jobs = {j["full"]["jobId"]: j["full"] for j in (await api.get("/api/v1/job-queues-v2")).json()["jobs"]}
    assert jobs[hers["jobId"]]["priority"] == jobs[theirs["jobId"]]["priority"] == 42
    r = await api.post("/api/v1/job-queues", headers=nora, json={"updates": [{"jobId": hers["jobId"], "priority": 10}]})
    assert r.status_code == 200, r.text


async def test_checkpoint_rm_of_someone_elses_checkpoint_deletes_nothing(api):
    nora = await add_user(api, "nora")
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    _, start = await running(api, agent)
    _, her_start = await running(api, agent, nora)
    theirs = await checkpoint_on_disk(api, start, 10)
    await checkpoint_on_disk(api, start, 20)  # the trial's latest: the older one may be deleted
    hers = await checkpoint_on_disk(api, her_start, 10)
    await checkpoint_on_disk(api, her_start, 20)
    for uuids in ([theirs], [hers, theirs]):
        r = await api.request("DELETE", "/api/v1/checkpoints", headers=nora, json={"checkpointUuids": uuids})
        assert r.status_code == 403 and theirs in r.json()["message"], r.text
    on_disk = {p.name for p in storage_dir(api).iterdir()}
    assert {theirs, hers} <= on_disk
    for ckpt in (theirs, hers):
        assert (await api.get(f"/api/v1/checkpoints/{ckpt}")).json()["checkpoint"]["state"] == "STATE_COMPLETED"
    admin = await login(api, "admin")
    r = await api.request("DELETE", "/api/v1/checkpoints", headers=admin, json={"checkpointUuids": [theirs]})
    assert r.status_code == 200 and r.json()["deleted"] == [theirs], r.text
    assert theirs not in {p.name for p in storage_dir(api).iterdir()}


async def test_model_changes_need_the_models_owner(api):
    nora = await add_user(api, "nora")
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    _, start = await running(api, agent)
    ckpt = await checkpoint_on_disk(api, start, 10)
    assert (await api.post("/api/v1/models", json={"name": "theirs", "description": "d"})).status_code == 200
    assert (await api.post("/api/v1/models/theirs/versions", json={"checkpointUuid": ckpt})).status_code == 200
    refused = [
        await api.patch("/api/v1/models/theirs", headers=nora, json={"description": "hers"}),
        await api.request("DELETE", "/api/v1/models/theirs", headers=nora),
        await api.post("/api/v1/models/theirs/versions", headers=nora, json={"checkpointUuid": ckpt}),
        await api.patch("/api/v1/models/theirs/versions/1", headers=nora, json={"comment": "hers"}),
        await api.request("DELETE", "/api/v1/models/theirs/versions/1", headers=nora),
    ]
    for r in refused:
        assert r.status_code == 403 and "model 'theirs'" in r.json()["message"], r.text
    model = (await api.get("/api/v1/models/theirs")).json()["model"]
    assert (model["description"], model["numVersions"]) == ("d", 1)
    version = (await api.get("/api/v1/models/theirs/versions/1")).json()["modelVersion"]
    assert version["comment"] == ""


async def test_a_viewer_reads_but_changes_nothing(api):
    vera = await add_user(api, "vera", "viewer")
    exp = await experiment(api)
    assert (await api.get(f"/api/v1/experiments/{exp['id']}", headers=vera)).status_code == 200
    for r in (await api.post(f"/api/v1/experiments/{exp['id']}/kill", headers=vera),
              await api.get(f"/api/v1/experiments/{exp['id']}/model_def", headers=vera),
              await create(api, yaml.safe_dump(ONE_TRIAL), vera)):
        assert r.status_code == 403, r.text
    assert (await api.get(f"/api/v1/experiments/{exp['id']}")).json()["experiment"]["state"] == "STATE_ACTIVE"
