"""Config templates over REST: Determined's paths and shapes, paging, bounds, owners and secrets."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from controlplane.master.db.models import Template
from controlplane.master.redaction import MASK

pytestmark = pytest.mark.both_databases  # listing ordered by name: collation differs

# What Determined 0.38.1's client requires of a template (bindings.v1Template.from_json).
V1_TEMPLATE = {"name", "config", "workspaceId"}
PAGINATION = {"offset", "limit", "startIndex", "endIndex", "total"}
GPU = {"resources": {"slots_per_trial": 1, "priority": 10}, "max_restarts": 7}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def new_user(api, name: str, role: str) -> dict:
    """A signed-in user of this role: the headers to act as them."""
    admin = (await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"]
    r = await api.post("/api/v1/users", headers=bearer(admin),
                       json={"user": {"username": name, "role": role}, "password": "pw", "isHashed": False})
    assert r.status_code == 200, r.text
    r = await api.post("/api/v1/auth/login", json={"username": name, "password": "pw"})
    return bearer(r.json()["token"])


async def admin_headers(api) -> dict:
    return bearer((await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"])


async def post_template(api, name: str, config: dict, headers: dict | None = None):
    # Determined's client: POST /templates/{name} with the v1Template, workspaceId 0 for the default.
    return await api.post(f"/api/v1/templates/{name}", headers=headers or {},
                          json={"name": name, "config": config, "workspaceId": 0})


async def stored_config(api, name: str) -> dict:
    async with api.rt.sessions() as session:
        return (await session.scalar(select(Template).where(Template.name == name))).config


async def test_create_describe_change_and_delete(api):
    r = await post_template(api, "gpu", GPU)
    assert r.status_code == 200, r.text
    tpl = r.json()["template"]
    assert V1_TEMPLATE <= set(tpl)
    assert (tpl["name"], tpl["config"], tpl["workspaceId"], tpl["username"]) == ("gpu", GPU, 1, "determined")

    again = await post_template(api, "gpu", {})
    assert again.status_code == 409 and again.json()["message"] == "name: a template named 'gpu' already exists"
    assert (await api.get("/api/v1/templates/gpu")).json()["template"]["config"] == GPU

    # PATCH takes the new config itself as the body (Determined's client sends it so).
    r = await api.patch("/api/v1/templates/gpu", json={"max_restarts": 2})
    assert r.status_code == 200, r.text
    assert r.json()["template"]["config"] == {"max_restarts": 2}
    # PUT creates or replaces; both the bare v1Template and {"template": ...} are read.
    r = await api.put("/api/v1/templates/gpu", json={"name": "gpu", "config": GPU, "workspaceId": 0})
    assert r.status_code == 200 and r.json()["template"]["config"] == GPU
    r = await api.put("/api/v1/templates/cpu", json={"template": {"name": "cpu", "config": {"max_restarts": 0}}})
    assert r.status_code == 200, r.text
    assert (await api.get("/api/v1/templates/cpu")).json()["template"]["config"] == {"max_restarts": 0}

    r = await api.delete("/api/v1/templates/gpu")
    assert r.status_code == 200 and r.json() == {}
    missing = await api.get("/api/v1/templates/gpu")
    assert missing.status_code == 404 and missing.json()["message"] == "template 'gpu' not found"
    assert (await api.delete("/api/v1/templates/gpu")).status_code == 404
    assert (await api.patch("/api/v1/templates/gpu", json={})).status_code == 404


async def test_list_pages_filters_and_orders_by_name(api):
    for name in ("echo", "alpha", "delta", "bravo", "charlie"):
        assert (await post_template(api, name, {"description": name})).status_code == 200
    r = await api.get("/api/v1/templates", params={"limit": 2})
    body = r.json()
    assert [t["name"] for t in body["templates"]] == ["alpha", "bravo"]
    assert body["pagination"] == {"offset": 0, "limit": 2, "startIndex": 0, "endIndex": 2, "total": 5}
    body = (await api.get("/api/v1/templates", params={"limit": 2, "offset": 4})).json()
    assert [t["name"] for t in body["templates"]] == ["echo"] and body["pagination"]["endIndex"] == 5
    body = (await api.get("/api/v1/templates", params={"orderBy": "ORDER_BY_DESC", "sortBy": "SORT_BY_NAME"})).json()
    assert [t["name"] for t in body["templates"]] == ["echo", "delta", "charlie", "bravo", "alpha"]
    body = (await api.get("/api/v1/templates", params={"name": "LT"})).json()
    assert [t["name"] for t in body["templates"]] == ["delta"] and body["pagination"]["total"] == 1
    assert (await api.get("/api/v1/templates", params={"workspaceIds": [2]})).json()["templates"] == []
    assert len((await api.get("/api/v1/templates", params={"workspaceIds": [1]})).json()["templates"]) == 5
    bad = await api.get("/api/v1/templates", params={"sortBy": "SORT_BY_SIZE"})
    assert bad.status_code == 400 and bad.json()["message"].startswith("sortBy:")


async def test_the_one_workspace_is_listed_for_determineds_client(api):
    body = (await api.get("/api/v1/workspaces")).json()
    assert [(w["id"], w["name"]) for w in body["workspaces"]] == [(1, "Uncategorized")]
    assert PAGINATION <= set(body["pagination"]) and body["pagination"]["total"] == 1
    assert (await api.get("/api/v1/workspaces", params={"nameCaseSensitive": "other"})).json()["workspaces"] == []


async def test_bad_input_is_a_4xx_naming_the_field(api):
    r = await post_template(api, "gpu", {"x": "y" * (1024 * 1024 + 10)})
    assert r.status_code == 400 and r.json()["message"].startswith("config: the config is about"), r.text
    deep: dict = {}
    node = deep
    for _ in range(80):
        node["a"] = {}
        node = node["a"]
    r = await post_template(api, "gpu", deep)
    assert r.status_code == 400 and "nested more than 64 levels deep" in r.json()["message"], r.text
    r = await api.post("/api/v1/templates/gpu", json={"name": "cpu", "config": {}})
    assert r.status_code == 400 and r.json()["message"].startswith("name: 'cpu' is not the template named"), r.text
    r = await api.post("/api/v1/templates/gpu", json={"name": "gpu"})
    assert r.status_code == 400 and r.json()["message"].startswith("config: required"), r.text
    r = await api.post("/api/v1/templates/gpu", json={"config": {}, "workspaceId": 7})
    assert r.status_code == 404 and r.json()["message"].startswith("workspaceId: workspace 7 not found")
    r = await api.post("/api/v1/templates/%20gpu", json={"config": {}})
    assert r.status_code == 400 and r.json()["message"].startswith("template_name:"), r.text
    r = await api.post(f"/api/v1/templates/{'n' * 256}", json={"config": {}})
    assert r.status_code == 400 and "template_name" in r.text, r.text
    r = await api.post("/api/v1/templates/a%01b", json={"config": {}})
    assert r.status_code == 400 and "template_name" in r.text, r.text
    r = await api.post("/api/v1/templates/gpu", json={"config": {"n": 2**70}})
    assert r.status_code == 400, r.text
    assert (await post_template(api, "gpu", {})).status_code == 200
    r = await api.patch("/api/v1/templates/gpu", json=[1, 2])
    assert r.status_code == 400, r.text
    assert (await api.get("/api/v1/templates")).json()["pagination"]["total"] == 1


async def test_viewers_read_users_change_their_own_and_admins_anything(api):
    viewer = await new_user(api, "vera", "viewer")
    nora = await new_user(api, "nora", "user")
    assert (await post_template(api, "gpu", GPU)).status_code == 200  # determined's

    assert (await api.get("/api/v1/templates/gpu", headers=viewer)).status_code == 200
    assert (await api.get("/api/v1/templates", headers=viewer)).json()["pagination"]["total"] == 1
    for r in (await post_template(api, "mine", {}, viewer),
              await api.put("/api/v1/templates/gpu", headers=viewer, json={"config": {}}),
              await api.patch("/api/v1/templates/gpu", headers=viewer, json={}),
              await api.delete("/api/v1/templates/gpu", headers=viewer)):
        assert r.status_code == 403, r.text

    for r in (await api.put("/api/v1/templates/gpu", headers=nora, json={"config": {}}),
              await api.patch("/api/v1/templates/gpu", headers=nora, json={}),
              await api.delete("/api/v1/templates/gpu", headers=nora)):
        assert r.status_code == 403, r.text
        assert r.json()["message"] == "only the owner of template 'gpu' or an admin may edit it"
    assert (await api.get("/api/v1/templates/gpu")).json()["template"]["config"] == GPU
    r = await post_template(api, "noras", {"max_restarts": 0}, nora)
    assert r.status_code == 200 and r.json()["template"]["username"] == "nora"
    assert (await api.patch("/api/v1/templates/noras", headers=nora, json={"max_restarts": 1})).status_code == 200

    admin = await admin_headers(api)
    assert (await api.patch("/api/v1/templates/noras", headers=admin, json={"max_restarts": 3})).status_code == 200
    assert (await api.delete("/api/v1/templates/gpu", headers=admin)).status_code == 200
    assert (await api.get("/api/v1/templates", headers={"Authorization": ""})).status_code == 401


SECRET = {"checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "AKIA1", "secret_key": "sk-2"},
          "environment": {"environment_variables": ["AWS_SECRET_ACCESS_KEY=env-3", "PATH=/bin"]}}


async def test_secrets_are_redacted_in_answers_and_kept_when_the_mask_comes_back(api):
    r = await post_template(api, "s3", SECRET)
    shown = r.json()["template"]["config"]
    assert shown["checkpoint_storage"] == {"type": "s3", "bucket": "b", "access_key": MASK, "secret_key": MASK}
    assert shown["environment"]["environment_variables"] == [f"AWS_SECRET_ACCESS_KEY={MASK}", "PATH=/bin"]
    for answer in ((await api.get("/api/v1/templates/s3")).text, (await api.get("/api/v1/templates")).text):
        assert not [s for s in ("AKIA1", "sk-2", "env-3") if s in answer], answer
    assert await stored_config(api, "s3") == SECRET

    # What describe showed, sent back with one change: the secrets stay, the change lands.
    shown["checkpoint_storage"]["bucket"] = "b2"
    r = await api.patch("/api/v1/templates/s3", json=shown)
    assert r.status_code == 200, r.text
    stored = await stored_config(api, "s3")
    assert stored["checkpoint_storage"] == {**SECRET["checkpoint_storage"], "bucket": "b2"}
    assert stored["environment"] == SECRET["environment"]
