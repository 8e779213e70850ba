"""The model registry pages: models paged and filtered by name; a model's versions with the
checkpoint, trial and experiment behind each (links to their pages); an unknown model is a 404
page; a live part htmx polls alone; bounded parameters."""

from __future__ import annotations

import re

from tests.controlplane.master.test_models_api import experiment_checkpoint, registry_agent


async def _model(api, name: str, description: str = "") -> None:
    r = await api.post("/api/v1/models", json={"name": name, "description": description, "labels": ["prod"]})
    assert r.status_code == 200, r.text


async def test_models_are_listed_paged_and_filtered_by_name(api):
    for name in ("alpha", "beta", "<i>gamma"):
        await _model(api, name, f"the {name} model")
    r = await api.get("/models")
    assert r.status_code == 200
    assert re.findall(r'<tr data-model="([^"]+)"', r.text) == ["&lt;i&gt;gamma", "alpha", "beta"]
    assert "<i>gamma" not in r.text  # autoescaped
    r = await api.get("/models?name=ALP")
    assert re.findall(r'<tr data-model="([^"]+)"', r.text) == ["alpha"]
    r = await api.get("/models?limit=1&offset=1", headers={"HX-Request": "true", "HX-Target": "live"})
    assert r.text.lstrip().startswith('<div id="live"') and "<html" not in r.text
    assert re.findall(r'<tr data-model="([^"]+)"', r.text) == ["alpha"] and "2–2 of 3" in r.text


async def test_a_model_page_links_each_version_to_its_checkpoint_trial_and_experiment(api):
    agent = await registry_agent(api)
    exp_a, trial_a, ckpt_a = await experiment_checkpoint(api, agent, 20, loss=0.5)
    exp_b, trial_b, ckpt_b = await experiment_checkpoint(api, agent, 30)
    await _model(api, "spirals", "the spirals net")
    for ckpt in (ckpt_a, ckpt_b):
        r = await api.post("/api/v1/models/spirals/versions", json={"checkpointUuid": ckpt})
        assert r.status_code == 200, r.text
    r = await api.get("/models/spirals")
    assert r.status_code == 200 and "the spirals net" in r.text
    versions = re.findall(r'<tr data-version="(\d+)">(.*?)</tr>', r.text, re.S)
    assert [v for v, _ in versions] == ["2", "1"]
    expected = [(exp_b, trial_b, ckpt_b, 30), (exp_a, trial_a, ckpt_a, 20)]
    for (_, row), (exp, trial, ckpt, steps) in zip(versions, expected, strict=True):
        assert f'href="/experiments/{exp}"' in row and f'href="/trials/{trial}"' in row
        assert f'title="{ckpt}"' in row and f'<td class="num">{steps}</td>' in row
    listed = await api.get("/models")
    assert re.search(r'<tr data-model="spirals">.*?<td class="num">2</td>', listed.text, re.S)


async def test_an_unknown_model_is_a_404_page_and_bad_parameters_are_400s(api):
    r = await api.get("/models/nope")
    assert r.status_code == 404 and "Model nope not found." in r.text
    live = await api.get("/models/nope", headers={"HX-Request": "true", "HX-Target": "live"})
    assert live.status_code == 404 and live.text.lstrip().startswith('<div id="live"')
    for query, name in (("limit=0", "limit"), ("limit=201", "limit"), ("offset=-1", "offset"),
                        ("name=" + "x" * 300, "name")):
        r = await api.get(f"/models?{query}")
        assert r.status_code == 400 and name in r.json()["message"], (query, r.text)
    r = await api.get("/models/" + "x" * 300)
    assert r.status_code == 400 and "model_name" in r.json()["message"], r.text
