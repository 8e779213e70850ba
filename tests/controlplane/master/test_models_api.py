"""The model registry over REST: models, versions numbered per model, lookups, errors, deletes."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from controlplane.master.checkpoint_gc.collect import registered_checkpoint_uuids
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_metrics_api import report
from tests.controlplane.master.test_trial_lifecycle import task_headers

pytestmark = pytest.mark.both_databases  # concurrent registrations get distinct numbers; sorting and pages

# What the Determined 0.38.1 client's from_json requires (bindings.v1Model, v1ModelVersion, v1Checkpoint).
V1_MODEL = {"archived", "creationTime", "id", "lastUpdatedTime", "metadata", "name", "numVersions", "userId",
            "username", "workspaceId"}
V1_MODEL_VERSION = {"checkpoint", "creationTime", "id", "lastUpdatedTime", "model", "version"}
V1_CHECKPOINT = {"metadata", "resources", "state", "training", "uuid"}
ONE_TRIAL = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


def assert_model_shape(model: dict) -> None:
    assert V1_MODEL <= {k for k, v in model.items() if v is not None}, model


def assert_version_shape(version: dict) -> None:
    assert V1_MODEL_VERSION <= {k for k, v in version.items() if v is not None}, version
    assert_model_shape(version["model"])
    assert V1_CHECKPOINT <= set(version["checkpoint"]), version["checkpoint"]


async def experiment_checkpoint(api, agent: FakeAgent, steps: int, *, loss: float | None = None,
                                state: str = "STATE_COMPLETED") -> tuple[int, int, str]:
    """A new one-trial experiment whose trial reports one checkpoint: (experiment, trial, uuid)."""
    exp_id = await create_experiment(api, ONE_TRIAL)
    start = await agent.next_message()
    await agent.start(start)
    h = task_headers(start.session_token)
    tid = int(start.env["DET_TRIAL_ID"])
    if loss is not None:
        r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", headers=h,
                           json={"reports": [report("validation", steps, {"loss": loss})]})
        assert r.status_code == 200, r.text
    ckpt = str(uuid.uuid4())
    r = await api.post("/api/v1/checkpoints", headers=h, json={
        "uuid": ckpt, "state": state, "resources": {"state.pt": "10"}, "metadata": {"steps_completed": steps},
        "training": {}})
    assert r.status_code == 200, r.text
    return exp_id, tid, ckpt


async def registry_agent(api) -> FakeAgent:
    agent = FakeAgent(api.rt, slots=4)
    await agent.register()
    return agent


async def test_versions_from_two_experiments_are_numbered_per_model(api):
    agent = await registry_agent(api)
    exp_a, trial_a, ckpt_a = await experiment_checkpoint(api, agent, 20, loss=0.5)
    exp_b, trial_b, ckpt_b = await experiment_checkpoint(api, agent, 30, loss=0.25)

    # The Determined CLI's exact body (reference §3, recorded): nulls for what it does not set.
    r = await api.post("/api/v1/models", json={"name": "spirals", "description": "the spirals net", "labels": None,
                                               "metadata": None, "notes": None, "workspaceName": None})
    assert r.status_code == 200, r.text
    model = r.json()["model"]
    assert_model_shape(model)
    assert (model["name"], model["description"], model["numVersions"], model["metadata"]) == \
        ("spirals", "the spirals net", 0, {})
    assert model["username"] == "determined" and model["workspaceId"] == 1 and model["archived"] is False

    first = await api.post("/api/v1/models/spirals/versions", json={"checkpointUuid": ckpt_a, "modelName": "spirals"})
    assert first.status_code == 200, first.text
    v1 = first.json()["modelVersion"]
    assert_version_shape(v1)
    assert v1["version"] == 1 and v1["model"]["numVersions"] == 1
    assert v1["checkpoint"]["uuid"] == ckpt_a and v1["checkpoint"]["state"] == "STATE_COMPLETED"
    training = v1["checkpoint"]["training"]
    assert (training["experimentId"], training["trialId"]) == (exp_a, trial_a)
    assert training["validationMetrics"]["avgMetrics"] == {"loss": 0.5}
    assert training["experimentConfig"]["searcher"]["metric"] == "loss"
    assert v1["checkpoint"]["metadata"] == {"steps_completed": 20}

    # The CLI's --json form posts to the numeric id, with only the uuid and extra fields.
    second = await api.post(f"/api/v1/models/{model['id']}/versions",
                            json={"checkpointUuid": ckpt_b, "name": "best", "comment": "lower loss",
                                  "metadata": {"loss": 0.25}, "notes": "n", "labels": ["prod"]})
    assert second.status_code == 200, second.text
    v2 = second.json()["modelVersion"]
    assert v2["version"] == 2 and v2["checkpoint"]["training"]["experimentId"] == exp_b
    assert (v2["name"], v2["comment"], v2["metadata"], v2["labels"]) == ("best", "lower loss", {"loss": 0.25}, ["prod"])

    by_name = (await api.get("/api/v1/models/spirals")).json()["model"]
    by_id = (await api.get(f"/api/v1/models/{model['id']}")).json()["model"]
    assert by_name == by_id and by_name["numVersions"] == 2
    assert by_name["lastUpdatedTime"] >= model["lastUpdatedTime"]

    listed = (await api.get("/api/v1/models/spirals/versions")).json()
    assert [v["version"] for v in listed["modelVersions"]] == [1, 2]
    assert listed["model"]["id"] == model["id"] and listed["pagination"]["total"] == 2
    for v in listed["modelVersions"]:
        assert_version_shape(v)
    # What `det model describe` asks for: the latest version.
    latest = (await api.get("/api/v1/models/spirals/versions",
                            params={"limit": 1, "sortBy": "SORT_BY_VERSION", "orderBy": "ORDER_BY_DESC"})).json()
    assert [v["version"] for v in latest["modelVersions"]] == [2]
    assert latest["pagination"] == {"offset": 0, "limit": 1, "startIndex": 0, "endIndex": 1, "total": 2}
    one = (await api.get(f"/api/v1/models/{model['id']}/versions/1")).json()["modelVersion"]
    assert one["checkpoint"]["uuid"] == ckpt_a and one["model"]["name"] == "spirals"

    # A second model numbers its own versions from 1, and may hold the same checkpoint.
    await api.post("/api/v1/models", json={"name": "other"})
    again = (await api.post("/api/v1/models/other/versions", json={"checkpointUuid": ckpt_b})).json()
    assert again["modelVersion"]["version"] == 1

    async with api.rt.sessions() as session:
        assert await registered_checkpoint_uuids(session) == {ckpt_a, ckpt_b}


async def test_list_models_sorts_filters_and_pages(api):
    agent = await registry_agent(api)
    _, _, ckpt = await experiment_checkpoint(api, agent, 10)
    for name, desc, labels in (("beta", "second", ["cv"]), ("alpha", "first", ["cv", "prod"]), ("Gamma", "", [])):
        r = await api.post("/api/v1/models", json={"name": name, "description": desc, "labels": labels})
        assert r.status_code == 200, r.text
    await api.post("/api/v1/models/Gamma/versions", json={"checkpointUuid": ckpt})

    async def names(**params) -> list[str]:
        r = await api.get("/api/v1/models", params=params)
        assert r.status_code == 200, r.text
        for m in r.json()["models"]:
            assert_model_shape(m)
        return [m["name"] for m in r.json()["models"]]

    assert await names() == ["beta", "alpha", "Gamma"]  # by id
    assert await names(sortBy="SORT_BY_NAME") == ["Gamma", "alpha", "beta"]
    assert await names(sortBy="SORT_BY_NAME", orderBy="ORDER_BY_DESC") == ["beta", "alpha", "Gamma"]
    assert (await names(sortBy="SORT_BY_NUM_VERSIONS", orderBy="ORDER_BY_DESC"))[0] == "Gamma"
    assert await names(name="MM") == ["Gamma"]
    assert await names(description="sec") == ["beta"]
    assert await names(labels=["cv", "prod"]) == ["alpha"]
    assert await names(users="determined") == ["beta", "alpha", "Gamma"]
    assert await names(users="admin") == []
    assert await names(workspaceNames="elsewhere") == []
    page = (await api.get("/api/v1/models", params={"limit": 2, "offset": 0, "sortBy": "SORT_BY_NAME"})).json()
    assert [m["name"] for m in page["models"]] == ["Gamma", "alpha"]
    assert page["pagination"] == {"offset": 0, "limit": 2, "startIndex": 0, "endIndex": 2, "total": 3}
    rest = (await api.get("/api/v1/models", params={"limit": 2, "offset": 2, "sortBy": "SORT_BY_NAME"})).json()
    assert [m["name"] for m in rest["models"]] == ["beta"] and rest["pagination"]["endIndex"] == 3


async def test_bad_input_names_the_field(api):
    agent = await registry_agent(api)
    _, _, active = await experiment_checkpoint(api, agent, 5, state="STATE_ACTIVE")
    assert (await api.post("/api/v1/models", json={"name": "m", "metadata": {"k": 1}})).status_code == 200

    cases = [
        ("POST", "/api/v1/models", {"description": "no name"}, 400, "name: required"),
        ("POST", "/api/v1/models", {"name": "   "}, 400, "name: required"),
        ("POST", "/api/v1/models", {"name": "123"}, 400, "name: must not be only digits"),
        ("POST", "/api/v1/models", {"name": "a/b"}, 400, "name: must not contain '/'"),
        ("POST", "/api/v1/models", {"name": "x", "metadata": [1]}, 400, "metadata: Expected `object | null`"),
        ("POST", "/api/v1/models", {"name": "x", "labels": "a"}, 400, "labels: Expected `array | null`"),
        ("POST", "/api/v1/models", {"name": "x", "workspaceName": "team"}, 404, "workspaceName"),
        ("POST", "/api/v1/models", {"name": "m"}, 409, "name: a model named 'm' already exists"),
        ("GET", "/api/v1/models/nope", None, 404, "model 'nope' not found"),
        ("GET", "/api/v1/models/999", None, 404, "model '999' not found"),
        ("GET", "/api/v1/models?sortBy=SORT_BY_COLOR", None, 400, "sortBy"),
        ("GET", "/api/v1/models/m/versions?orderBy=UP", None, 400, "orderBy"),
        ("GET", "/api/v1/models/m/versions/7", None, 404, "model 'm' has no version 7"),
        ("GET", "/api/v1/models/m/versions/x", None, 404, "Not Found"),
        ("GET", "/api/v1/models/m/versions/0", None, 400, "number"),
        ("POST", "/api/v1/models/m/versions", {}, 400, "checkpointUuid: required"),
        ("POST", "/api/v1/models/m/versions", {"checkpointUuid": "deadbeef-0000"}, 404,
         "checkpointUuid: checkpoint deadbeef-0000 not found"),
        ("POST", "/api/v1/models/m/versions", {"checkpointUuid": active}, 400, "STATE_COMPLETED"),
        ("POST", "/api/v1/models/m/versions", {"checkpointUuid": active, "modelName": "n"}, 400, "modelName"),
        ("POST", "/api/v1/models/nope/versions", {"checkpointUuid": active}, 404, "model 'nope' not found"),
        ("PATCH", "/api/v1/models/m", {"notes": 5}, 400, "notes: Expected `str | null`, got `int`"),
    ]
    for method, path, body, status, needle in cases:
        r = await api.request(method, path, json=body)
        assert r.status_code == status and needle in r.json()["message"], (method, path, body, r.text)
        assert r.json()["error"]["error"] == r.json()["message"]
    assert (await api.get("/api/v1/models/m")).json()["model"]["numVersions"] == 0
    r = await api.get("/api/v1/models", headers={"Authorization": ""})
    assert r.status_code == 401


async def test_patch_rename_and_url_quoted_names(api):
    for name in ("my model", "taken"):
        assert (await api.post("/api/v1/models", json={"name": name})).status_code == 200
    before = (await api.get("/api/v1/models/my%20model")).json()["model"]  # the client quotes the name
    r = await api.patch("/api/v1/models/my%20model", json={"description": "d", "notes": "n",
                                                         "metadata": {"a": 1}, "labels": ["x"]})
    assert r.status_code == 200, r.text
    m = r.json()["model"]
    assert (m["description"], m["notes"], m["metadata"], m["labels"]) == ("d", "n", {"a": 1}, ["x"])
    assert m["lastUpdatedTime"] >= before["lastUpdatedTime"]
    r = await api.patch("/api/v1/models/my%20model", json={"notes": "only notes"})
    assert r.json()["model"]["description"] == "d"  # absent fields are kept
    r = await api.patch(f"/api/v1/models/{m['id']}", json={"name": "taken"})
    assert r.status_code == 409 and "name" in r.json()["message"]
    r = await api.patch(f"/api/v1/models/{m['id']}", json={"name": "renamed"})
    assert r.status_code == 200 and (await api.get("/api/v1/models/renamed")).json()["model"]["id"] == m["id"]


async def test_deletes_need_owner_or_admin_and_keep_checkpoints(api):
    agent = await registry_agent(api)
    _, _, ckpt_a = await experiment_checkpoint(api, agent, 10)
    _, _, ckpt_b = await experiment_checkpoint(api, agent, 20)
    assert (await api.post("/api/v1/models", json={"name": "mine"})).status_code == 200
    for ckpt in (ckpt_a, ckpt_b):
        assert (await api.post("/api/v1/models/mine/versions", json={"checkpointUuid": ckpt})).status_code == 200
    r = await api.patch("/api/v1/models/mine/versions/2", json={"comment": "c", "notes": "n"})
    assert r.status_code == 200 and r.json()["modelVersion"]["comment"] == "c"
    r = await api.patch("/api/v1/models/mine/versions/2", json={"checkpoint": {"uuid": ckpt_a}})
    assert r.status_code == 400 and "checkpoint" in r.json()["message"]

    login = await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
    admin = {"Authorization": f"Bearer {login.json()['token']}"}
    assert (await api.post("/api/v1/models", json={"name": "admins"}, headers=admin)).status_code == 200
    r = await api.delete("/api/v1/models/admins")  # "determined" is not its owner, nor an admin
    assert r.status_code == 403 and "owner" in r.json()["message"]

    assert (await api.delete("/api/v1/models/mine/versions/1")).status_code == 200
    assert [v["version"] for v in (await api.get("/api/v1/models/mine/versions")).json()["modelVersions"]] == [2]
    async with api.rt.sessions() as session:
        assert await registered_checkpoint_uuids(session) == {ckpt_b}
    assert (await api.delete("/api/v1/models/mine")).status_code == 200
    assert (await api.get("/api/v1/models/mine")).status_code == 404
    assert (await api.delete("/api/v1/models/admins", headers=admin)).status_code == 200
    async with api.rt.sessions() as session:
        assert await registered_checkpoint_uuids(session) == set()
    for ckpt in (ckpt_a, ckpt_b):  # the registry never deletes checkpoints
        assert (await api.get(f"/api/v1/checkpoints/{ckpt}")).status_code == 200


async def test_concurrent_registrations_get_distinct_numbers(api):
    agent = await registry_agent(api)
    _, _, ckpt = await experiment_checkpoint(api, agent, 10)
    assert (await api.post("/api/v1/models", json={"name": "busy"})).status_code == 200
    replies = await asyncio.gather(*(api.post("/api/v1/models/busy/versions", json={"checkpointUuid": ckpt})
                                     for _ in range(6)))
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    assert sorted(r.json()["modelVersion"]["version"] for r in replies) == [1, 2, 3, 4, 5, 6]


async def test_archive_and_unarchive_need_the_owner_and_stop_new_versions(api):
    agent = await registry_agent(api)
    _, _, ckpt = await experiment_checkpoint(api, agent, 10)
    assert (await api.post("/api/v1/models", json={"name": "kept"})).status_code == 200
    login = await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
    admin = {"Authorization": f"Bearer {login.json()['token']}"}
    assert (await api.post("/api/v1/models", json={"name": "admins"}, headers=admin)).status_code == 200
    r = await api.post("/api/v1/models/admins/archive")
    assert r.status_code == 403 and "owner" in r.json()["message"], r.text

    for _ in range(2):  # twice changes nothing, as in Determined
        r = await api.post("/api/v1/models/kept/archive")
        assert r.status_code == 200 and r.json() == {}, r.text
    assert (await api.get("/api/v1/models/kept")).json()["model"]["archived"] is True
    assert [m["name"] for m in (await api.get("/api/v1/models", params={"archived": "false"})).json()["models"]] \
        == ["admins"]
    r = await api.post("/api/v1/models/kept/versions", json={"checkpointUuid": ckpt})
    assert r.status_code == 400 and "archived" in r.json()["message"], r.text
    model_id = (await api.get("/api/v1/models/kept")).json()["model"]["id"]
    assert (await api.post(f"/api/v1/models/{model_id}/unarchive")).status_code == 200  # by id too
    assert (await api.get("/api/v1/models/kept")).json()["model"]["archived"] is False
    assert (await api.post("/api/v1/models/kept/versions", json={"checkpointUuid": ckpt})).status_code == 200
    assert (await api.post("/api/v1/models/nothing/archive")).status_code == 404
