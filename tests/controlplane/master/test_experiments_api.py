"""Creating, listing and describing experiments; bad input never half-creates anything."""

from __future__ import annotations

import base64

import pytest
import yaml

from tests.controlplane.master.conftest import CONFIG, create_experiment

pytestmark = pytest.mark.both_databases  # listing, filters and pages are SQL


async def test_create_list_get(api):
    exp_id = await create_experiment(api)
    r = await api.get("/api/v1/experiments")
    assert r.status_code == 200
    body = r.json()
    assert [e["id"] for e in body["experiments"]] == [exp_id]
    assert body["pagination"]["total"] == 1 and body["pagination"]["endIndex"] == 1
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_ACTIVE"
    assert exp["config"]["searcher"]["max_concurrent_trials"] == 2
    assert exp["config"]["checkpoint_storage"]["type"] == "shared_fs"
    trials = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    assert len(trials) == 2 and all(t["state"] == "STATE_QUEUED" for t in trials)


async def test_same_seed_gives_same_hparams(api):
    a = await create_experiment(api)
    b = await create_experiment(api)
    hp = []
    for exp_id in (a, b):
        trials = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
        hp.append([t["hparams"] for t in trials])
    assert hp[0] == hp[1]


async def test_bad_config_names_field_and_rule(api):
    bad = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 0}}
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(bad), "modelDefinition": []})
    assert r.status_code == 400
    assert "searcher.max_trials: must be >= 1, got 0" in r.json()["message"]
    assert (await api.get("/api/v1/experiments")).json()["experiments"] == []


async def test_yaml_syntax_error_gives_line(api):
    r = await api.post("/api/v1/experiments", json={"config": "name: x\nsearcher: [unclosed\n", "modelDefinition": []})
    assert r.status_code == 400
    assert "line" in r.json()["message"]


async def test_hostile_context_is_refused(api):
    evil = [{"path": "../../etc/passwd", "type": 48, "content": base64.b64encode(b"x").decode(), "mtime": "0"}]
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(CONFIG), "modelDefinition": evil})
    assert r.status_code == 400
    assert "escapes the context" in r.json()["message"]
    assert (await api.get("/api/v1/experiments")).json()["experiments"] == []


async def test_unknown_ids_are_404(api):
    assert (await api.get("/api/v1/experiments/999")).status_code == 404
    assert (await api.get("/api/v1/trials/999")).status_code == 404
    assert (await api.post("/api/v1/experiments/999/kill")).status_code == 404
    assert (await api.get("/api/v1/experiments/abc")).status_code == 404  # no such route
    r = await api.get(f"/api/v1/experiments/{2**70}")
    assert r.status_code == 400 and "exp_id" in r.json()["message"], r.text


async def test_no_token_no_data(api):
    token = api.headers.pop("Authorization")
    try:
        for path in ("/api/v1/experiments", "/api/v1/agents", "/api/v1/me"):
            r = await api.get(path)
            assert r.status_code == 401, path
            assert "experiments" not in r.json()
        r = await api.get("/api/v1/experiments", headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401
    finally:
        api.headers["Authorization"] = token


async def test_paused_then_activate_creates_trials(api):
    exp_id = await create_experiment(api, activate=False)
    assert (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["state"] == "STATE_PAUSED"
    assert (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"] == []
    assert (await api.post(f"/api/v1/experiments/{exp_id}/activate")).status_code == 200
    assert len((await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]) == 2


async def test_kill_queued_experiment_cancels_it(api):
    exp_id = await create_experiment(api)
    assert (await api.post(f"/api/v1/experiments/{exp_id}/kill")).status_code == 200
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_CANCELED"
    trials = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    assert {t["state"] for t in trials} == {"STATE_CANCELED"}


async def test_openapi_is_served(api):
    r = await api.get("/docs/openapi.json")
    assert r.status_code == 200
    assert "/api/v1/experiments" in r.json()["paths"]
