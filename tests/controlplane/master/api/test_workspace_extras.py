"""What Determined 0.38.1's client asks of workspaces, projects, pools and models beyond the basics:
archive/unarchive of workspaces and projects (owner or admin; the defaults stay), the pool bindings
(none: every pool serves every workspace) and the registry's model labels, most used first."""

from __future__ import annotations

from tests.controlplane.master.test_users_api import admin, bearer, create_user, login  # noqa: F401 (a fixture)


async def test_workspaces_and_projects_archive_and_unarchive(api, admin):  # noqa: F811
    ws = (await api.post("/api/v1/workspaces", json={"name": "vision"})).json()["workspace"]["id"]
    project = (await api.post(f"/api/v1/workspaces/{ws}/projects", json={"name": "p", "workspaceId": ws}))
    project_id = project.json()["project"]["id"]
    assert (await api.post(f"/api/v1/workspaces/{ws}/archive")).status_code == 200
    assert (await api.get(f"/api/v1/workspaces/{ws}")).json()["workspace"]["archived"] is True
    assert (await api.post(f"/api/v1/projects/{project_id}/archive")).status_code == 200
    assert (await api.get(f"/api/v1/projects/{project_id}")).json()["project"]["archived"] is True
    assert (await api.post(f"/api/v1/workspaces/{ws}/unarchive")).status_code == 200
    assert (await api.post(f"/api/v1/projects/{project_id}/unarchive")).status_code == 200
    assert (await api.get(f"/api/v1/projects/{project_id}")).json()["project"]["archived"] is False
    r = await api.post("/api/v1/workspaces/1/archive", headers=bearer(admin))
    assert r.status_code == 409, r.text  # Determined's default stays, even for an admin
    await create_user(api, admin, "nora", password="pw")
    r = await api.post(f"/api/v1/workspaces/{ws}/archive", headers=bearer(await login(api, "nora", "pw")))
    assert r.status_code == 403, r.text
    assert (await api.post("/api/v1/workspaces/999999/archive")).status_code == 404


async def test_pool_bindings_and_model_labels(api):
    r = await api.get("/api/v1/resource-pools/default/workspace-bindings")
    assert r.status_code == 200 and r.json()["workspaceIds"] == []
    assert (await api.get("/api/v1/resource-pools/nope/workspace-bindings")).status_code == 404
    r = await api.get("/api/v1/workspaces/1/available-resource-pools")
    assert r.status_code == 200 and r.json()["resourcePools"] == ["default"]
    for name, labels in (("a", ["cv", "prod"]), ("b", ["cv"]), ("c", [])):
        assert (await api.post("/api/v1/models", json={"name": name, "labels": labels})).status_code == 200
    r = await api.get("/api/v1/model/labels")
    assert r.status_code == 200 and r.json()["labels"] == ["cv", "prod"]
