"""Changes after create, as Determined's client makes them: archive, labels, kill one trial,
continue, delete; the cluster's checkpoint storage under a partial one; `det e set` in the config."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import cast

import pytest
import yaml

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # cascading deletes, JSON metadata and summary metrics in SQL

ONE = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}
SINGLE = {**CONFIG, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def report_checkpoint(api, start: wire.StartTask, steps: int) -> str:
    """Its files staged where the task writes them, which the master publishes on the report."""
    ckpt = str(uuid.uuid4())
    staged = Path(start.trial_info["config"]["checkpoint_storage"]["host_path"]) / ".staging" / start.allocation_id
    (staged / ckpt).mkdir(parents=True)
    (staged / ckpt / "state.pt").write_bytes(b"x" * 10)
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "taskId": start.task_id, "allocationId": start.allocation_id, "state": "STATE_COMPLETED",
        "resources": {"state.pt": "10"}, "metadata": {"steps_completed": steps}, "training": {}})
    assert r.status_code == 200, r.text
    return ckpt


async def report(api, start: wire.StartTask, group: str, steps: int, metrics: dict) -> None:
    trial_id = int(start.env["DET_TRIAL_ID"])
    r = await api.post(f"/api/v1/trials/{trial_id}/metrics", headers=task_headers(start.session_token),
                       json={"group": group, "metrics": {"stepsCompleted": steps, "metrics": {"avgMetrics": metrics}}})
    assert r.status_code == 200, r.text


async def state(api, exp_id: int) -> str:
    return (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["state"]


async def trials(api, exp_id: int) -> list[dict]:
    return (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]


async def run_to_end(api, config: dict | None = None, code: int = 0) -> tuple[int, wire.StartTask, str]:
    """A one-trial experiment whose trial checkpoints at 5 and exits with ``code``."""
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, config or ONE)
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    ckpt = await report_checkpoint(api, start, 5)
    await agent.exit(start.allocation_id, code)
    api.agent = agent
    return exp_id, start, ckpt


# ---- config --------------------------------------------------------------------------------------
async def test_partial_checkpoint_storage_takes_the_cluster_default_and_checkpoint_policy_is_kept(api):
    config = {**ONE, "checkpoint_storage": {"save_trial_best": 0, "save_trial_latest": 0},
              "checkpoint_policy": "none"}
    exp_id = await create_experiment(api, config)
    cfg = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["config"]
    assert cfg["checkpoint_storage"]["type"] == "shared_fs"
    assert cfg["checkpoint_storage"]["host_path"] == str(api.rt.settings.data_dir / "checkpoints")
    assert (cfg["checkpoint_storage"]["save_trial_best"], cfg["checkpoint_storage"]["save_trial_latest"]) == (0, 0)
    assert cfg["checkpoint_policy"] == "none"
    bad = {**ONE, "checkpoint_policy": "sometimes"}
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(bad), "modelDefinition": []})
    assert r.status_code == 400 and "checkpoint_policy: must be one of best, all, none" in r.json()["message"]


async def test_set_priority_and_max_slots_show_in_the_config(api):
    exp_id = await create_experiment(api, ONE)
    r = await api.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"priority": 7, "maxSlots": 3}})
    assert r.status_code == 200, r.text
    body = (await api.get(f"/api/v1/experiments/{exp_id}")).json()
    for cfg in (body["config"], body["experiment"]["config"]):
        assert cfg["resources"]["priority"] == 7 and cfg["resources"]["max_slots"] == 3


# ---- archive, labels -----------------------------------------------------------------------------
async def test_archive_only_an_ended_experiment_and_once(api):
    exp_id = await create_experiment(api, ONE)
    r = await api.post(f"/api/v1/experiments/{exp_id}/archive")
    assert r.status_code == 409 and "only an ended experiment" in r.json()["message"]
    await api.post(f"/api/v1/experiments/{exp_id}/kill")
    assert (await api.post(f"/api/v1/experiments/{exp_id}/archive")).status_code == 200
    assert (await api.post(f"/api/v1/experiments/{exp_id}/archive")).status_code == 409
    listed = (await api.get("/api/v1/experiments", params={"archived": "false"})).json()["experiments"]
    assert exp_id not in [e["id"] for e in listed]
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["archived"] is True
    assert (await api.post(f"/api/v1/experiments/{exp_id}/unarchive")).status_code == 200
    r = await api.post(f"/api/v1/experiments/{exp_id}/unarchive")
    assert r.status_code == 409 and "not archived" in r.json()["message"]


async def test_labels_put_and_delete(api):
    exp_id = await create_experiment(api, ONE)
    assert (await api.put(f"/api/v1/experiments/{exp_id}/labels/fast")).json() == {"labels": ["fast"]}
    assert (await api.put(f"/api/v1/experiments/{exp_id}/labels/fast")).json() == {"labels": ["fast"]}
    assert (await api.put(f"/api/v1/experiments/{exp_id}/labels/b")).json() == {"labels": ["fast", "b"]}
    assert (await api.delete(f"/api/v1/experiments/{exp_id}/labels/fast")).json() == {"labels": ["b"]}
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["labels"] == ["b"]
    assert (await api.put("/api/v1/experiments/999/labels/x")).status_code == 404


async def test_pause_or_activate_of_an_ended_experiment_is_409(api):
    exp_id, _, _ = await run_to_end(api)
    assert await state(api, exp_id) == "STATE_COMPLETED"
    for verb in ("pause", "activate"):
        r = await api.post(f"/api/v1/experiments/{exp_id}/{verb}")
        assert r.status_code == 409 and "COMPLETED" in r.json()["message"], r.text
    assert await state(api, exp_id) == "STATE_COMPLETED"


# ---- kill one trial ------------------------------------------------------------------------------
async def test_kill_trial_running_and_queued(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api)  # two trials, one slot: one runs, one waits
    start = await agent.next_message()
    await agent.start(start)
    running = int(start.env["DET_TRIAL_ID"])
    queued = next(t["id"] for t in await trials(api, exp_id) if t["id"] != running)
    assert (await api.post(f"/api/v1/trials/{queued}/kill")).status_code == 200
    states = {t["id"]: t["state"] for t in await trials(api, exp_id)}
    assert states == {running: "STATE_RUNNING", queued: "STATE_CANCELED"}
    assert (await api.post(f"/api/v1/trials/{running}/kill")).status_code == 200
    kill = await agent.next_message()
    assert isinstance(kill, wire.KillTask) and kill.allocation_id == start.allocation_id
    assert {t["id"]: t["state"] for t in await trials(api, exp_id)}[running] == "STATE_STOPPING_KILLED"
    await agent.exit(start.allocation_id, 137)
    assert {t["state"] for t in await trials(api, exp_id)} == {"STATE_CANCELED"}
    # Every trial was canceled by a user: no failure (Determined's searcher.go), so CANCELED, not ERROR.
    assert await state(api, exp_id) == "STATE_CANCELED"
    assert (await api.post(f"/api/v1/trials/{running}/kill")).status_code == 200  # ended: nothing changes
    assert (await api.post("/api/v1/trials/999/kill")).status_code == 404


# ---- continue ------------------------------------------------------------------------------------
async def test_continue_single_resumes_its_trial_with_the_override(api):
    exp_id, first, ckpt = await run_to_end(api, SINGLE)
    assert await state(api, exp_id) == "STATE_COMPLETED"
    override = yaml.safe_dump({"searcher": {"max_length": {"batches": 20}}})
    r = await api.post("/api/v1/experiments/continue", json={"id": exp_id, "overrideConfig": override})
    assert r.status_code == 200, r.text
    assert r.json()["experiment"]["state"] == "STATE_ACTIVE"
    again = await api.agent.next_message()
    assert isinstance(again, wire.StartTask)
    assert again.env["DET_TRIAL_ID"] == first.env["DET_TRIAL_ID"] and again.env["DET_LATEST_CHECKPOINT"] == ckpt
    assert '"batches": 20' in again.env["DET_EXPERIMENT_CONFIG"].replace('"batches":20', '"batches": 20')
    cfg = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["config"]
    assert cfg["searcher"]["max_length"] == {"batches": 20}
    (trial,) = await trials(api, exp_id)
    assert trial["state"] == "STATE_QUEUED" and trial["restarts"] == 0 and trial["endTime"] is None
    await api.agent.start(again)
    await api.agent.exit(again.allocation_id, 0)
    assert await state(api, exp_id) == "STATE_COMPLETED"


async def test_continue_refusals(api):
    exp_id = await create_experiment(api, ONE)
    r = await api.post("/api/v1/experiments/continue", json={"id": exp_id})
    assert r.status_code == 409 and "only an ended experiment" in r.json()["message"]
    assert (await api.post("/api/v1/experiments/continue", json={"id": 999})).status_code == 404
    r = await api.post("/api/v1/experiments/continue", json={"idd": 1})
    assert r.status_code == 400 and "id" in r.json()["message"]
    assert (await api.post(f"/api/v1/experiments/{exp_id}/kill")).status_code == 200
    done, _, _ = await run_to_end(api)
    r = await api.post("/api/v1/experiments/continue", json={"id": done})
    assert r.status_code == 409 and "nothing to continue" in r.json()["message"]
    r = await api.post("/api/v1/experiments/continue", json={"id": done, "overrideConfig": "max_restarts: 3"})
    assert r.status_code == 400 and r.json()["message"].startswith("overrideConfig:")


async def test_continue_search_reruns_only_the_trials_that_did_not_complete(api):
    exp_id, first, _ = await run_to_end(api, {**ONE, "max_restarts": 0}, code=1)
    assert await state(api, exp_id) == "STATE_ERROR"
    r = await api.post("/api/v1/experiments/continue", json={"id": exp_id, "overrideConfig": "{}\n"})
    assert r.status_code == 200, r.text
    again = await api.agent.next_message()
    assert isinstance(again, wire.StartTask) and again.env["DET_TRIAL_ID"] == first.env["DET_TRIAL_ID"]
    await api.agent.start(again)
    await api.agent.exit(again.allocation_id, 0)
    assert await state(api, exp_id) == "STATE_COMPLETED"


# ---- delete --------------------------------------------------------------------------------------
async def test_delete_removes_rows_and_checkpoint_files(api):
    exp_id, start, ckpt = await run_to_end(api, {**ONE, "checkpoint_storage": {"save_trial_latest": 1}})
    assert (await api.get(f"/api/v1/trials/{start.env['DET_TRIAL_ID']}")).status_code == 200
    files = Path(api.rt.settings.data_dir / "checkpoints" / ckpt)
    assert (files / "state.pt").read_bytes() == b"x" * 10  # published by the report
    r = await api.delete(f"/api/v1/experiments/{exp_id}")
    assert r.status_code == 200 and r.json() == {"state": "STATE_DELETED"}, r.text
    assert not files.exists()
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).status_code == 404
    assert (await api.get(f"/api/v1/checkpoints/{ckpt}")).status_code == 404
    assert (await api.get(f"/api/v1/trials/{start.env['DET_TRIAL_ID']}")).status_code == 404
    assert (await api.delete(f"/api/v1/experiments/{exp_id}")).status_code == 404


async def test_delete_refuses_live_and_registered_work(api):
    live = await create_experiment(api, ONE)
    r = await api.delete(f"/api/v1/experiments/{live}")
    assert r.status_code == 409 and "only an ended experiment" in r.json()["message"]
    assert await state(api, live) == "STATE_ACTIVE"
    assert (await api.post(f"/api/v1/experiments/{live}/kill")).status_code == 200
    exp_id, _, ckpt = await run_to_end(api)
    assert (await api.post("/api/v1/models", json={"name": "m"})).status_code == 200
    assert (await api.post("/api/v1/models/m/versions", json={"checkpointUuid": ckpt})).status_code == 200
    r = await api.delete(f"/api/v1/experiments/{exp_id}")
    assert r.status_code == 409 and "model registry" in r.json()["message"]
    assert await state(api, exp_id) == "STATE_COMPLETED"


async def test_delete_that_cannot_remove_files_is_delete_failed_and_can_be_retried(api, monkeypatch):
    from controlplane.master.checkpoint_gc import collect as checkpoint_gc

    exp_id, _, ckpt = await run_to_end(api)

    def broken(rt, config, name):
        raise OSError("storage is down")

    monkeypatch.setattr(checkpoint_gc, "_delete_files", broken)
    r = await api.delete(f"/api/v1/experiments/{exp_id}")
    assert r.status_code == 200 and r.json() == {"state": "STATE_DELETE_FAILED"}
    assert await state(api, exp_id) == "STATE_DELETE_FAILED"
    assert (await api.get(f"/api/v1/checkpoints/{ckpt}")).json()["checkpoint"]["state"] == "STATE_PARTIALLY_DELETED"
    monkeypatch.undo()
    assert (await api.delete(f"/api/v1/experiments/{exp_id}")).json() == {"state": "STATE_DELETED"}
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).status_code == 404


# ---- checkpoint metadata -------------------------------------------------------------------------
async def test_checkpoint_metadata_is_replaced(api):
    _, _, ckpt = await run_to_end(api)
    body = {"checkpoint": {"uuid": ckpt, "metadata": {"steps_completed": 5, "note": "best"}, "resources": {},
                           "training": {}, "state": "STATE_UNSPECIFIED"}}
    r = await api.post(f"/api/v1/checkpoints/{ckpt}/metadata", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint"]["metadata"] == {"steps_completed": 5, "note": "best"}
    assert (await api.get(f"/api/v1/checkpoints/{ckpt}")).json()["checkpoint"]["metadata"]["note"] == "best"
    r = await api.post(f"/api/v1/checkpoints/{ckpt}/metadata", json={"checkpoint": {"uuid": "other", "metadata": {}}})
    assert r.status_code == 400 and r.json()["message"].startswith("checkpoint.uuid:")
    r = await api.post("/api/v1/checkpoints/nope/metadata", json={"checkpoint": {"metadata": {}}})
    assert r.status_code == 404


# ---- metric reads --------------------------------------------------------------------------------
async def test_metric_streams_and_summary_metrics(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, ONE)
    start = await agent.next_message()
    await agent.start(start)
    trial_id = int(start.env["DET_TRIAL_ID"])
    for steps, loss in ((1, 0.9), (2, 0.5), (3, "NaN")):
        await report(api, start, "training", steps, {"loss": loss, "phase": "warm"})
    await report(api, start, "validation", 2, {"loss": 0.4})
    await report(api, start, "custom", 2, {"x": 1})

    async def stream(path: str, **params) -> list[dict]:
        r = await api.get(f"/api/v1/trials/metrics/{path}", params={"trialIds": trial_id, **params})
        assert r.status_code == 200, r.text
        lines = [yaml.safe_load(line) for line in r.text.splitlines() if line]
        return [m for line in lines for m in line["result"]["metrics"]]

    training = await stream("trial_metrics", group="training")
    assert [(m["totalBatches"], m["metrics"]["avg_metrics"]["loss"]) for m in training] == \
        [(1, 0.9), (2, 0.5), (3, "NaN")]
    assert {m["group"] for m in training} == {"training"} and training[0]["trialId"] == trial_id
    assert [m["totalBatches"] for m in await stream("training_metrics")] == [1, 2, 3]
    (val,) = await stream("validation_metrics")
    assert val["metrics"] == {"validation_metrics": {"loss": 0.4}}
    assert [m["metrics"]["avg_metrics"] for m in await stream("trial_metrics", group="custom")] == [{"x": 1}]
    assert (await api.get("/api/v1/trials/metrics/trial_metrics", params={"group": "training"})).status_code == 400
    assert (await api.get("/api/v1/trials/metrics/training_metrics", params={"trialIds": 999})).status_code == 404
    r = await api.get("/api/v1/trials/metrics/trial_metrics", params={"trialIds": trial_id})
    assert r.status_code == 400 and r.json()["message"].startswith("group:")

    summary = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]["summaryMetrics"]
    loss = summary["avg_metrics"]["loss"]
    assert loss["type"] == "number" and loss["count"] == 3 and loss["min"] == "NaN" and loss["last"] == "NaN"
    assert summary["avg_metrics"]["phase"] == {"type": "string", "last": "warm"}
    assert summary["validation_metrics"]["loss"] == {"type": "number", "count": 1, "min": 0.4, "max": 0.4,
                                                     "sum": 0.4, "mean": 0.4, "last": 0.4}
    assert summary["custom"]["x"]["sum"] == 1 and exp_id


# ---- move, weight --------------------------------------------------------------------------------
async def test_move_to_another_project_needs_owner_and_an_open_destination(api):
    from sqlalchemy import update

    from controlplane.master.db.models import Project
    from tests.controlplane.master.test_ownership import add_user

    exp_id = await create_experiment(api, ONE)
    ws = (await api.post("/api/v1/workspaces", json={"name": "vision"})).json()["workspace"]
    dest = (await api.post(f"/api/v1/workspaces/{ws['id']}/projects",
                           json={"name": "detection", "workspaceId": ws["id"]})).json()["project"]
    nora = await add_user(api, "nora")
    r = await api.post(f"/api/v1/experiments/{exp_id}/move", headers=nora,
                       json={"destinationProjectId": dest["id"], "experimentId": exp_id})
    assert r.status_code == 403, r.text
    r = await api.post(f"/api/v1/experiments/{exp_id}/move", json={"destinationProjectId": 999})
    assert r.status_code == 404 and "project 999" in r.text, r.text
    r = await api.post(f"/api/v1/experiments/{exp_id}/move", json={"destinationProjectId": dest["id"],
                                                                   "experimentId": exp_id + 1})
    assert r.status_code == 400 and "experimentId" in r.text, r.text

    r = await api.post(f"/api/v1/experiments/{exp_id}/move",
                       json={"destinationProjectId": dest["id"], "experimentId": exp_id})
    assert r.status_code == 200 and r.json() == {}, r.text
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert (exp["projectId"], exp["projectName"], exp["workspaceName"]) == (dest["id"], "detection", "vision")
    assert [e["id"] for e in (await api.get("/api/v1/experiments", params={"projectId": dest["id"]})).json()[
        "experiments"]] == [exp_id]

    async with api.rt.sessions.begin() as session:
        await session.execute(update(Project).where(Project.id == 1).values(archived=True))
    r = await api.post(f"/api/v1/experiments/{exp_id}/move", json={"destinationProjectId": 1})
    assert r.status_code == 409 and "archived" in r.text, r.text
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["projectId"] == dest["id"]


async def test_weight_is_stored_under_the_priority_scheduler(api):
    exp_id = await create_experiment(api, ONE)  # the default pool schedules by priority
    r = await api.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"weight": 2.5}})
    assert r.status_code == 200, r.text
    assert r.json()["experiment"]["config"]["resources"]["weight"] == 2.5
    r = await api.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"weight": 0}})
    assert r.status_code == 400 and "weight" in r.text, r.text
