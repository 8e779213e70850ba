"""Workspaces and projects over REST: Determined's defaults, shapes, owners, and experiments' projects."""

from __future__ import annotations

import pytest
import yaml

from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_templates_api import admin_headers, new_user

pytestmark = pytest.mark.both_databases  # unique names and NUL bytes: the constraint and text type differ

# What Determined 0.38.1's client requires (bindings.v1Workspace / v1Project .from_json).
V1_WORKSPACE = {"archived", "errorMessage", "id", "immutable", "name", "numExperiments", "numProjects", "pinned",
                "state", "userId", "username"}
V1_PROJECT = {"archived", "errorMessage", "id", "immutable", "key", "name", "notes", "numActiveExperiments",
              "numExperiments", "numRuns", "state", "userId", "username", "workspaceId"}


async def test_the_defaults_exist_with_determineds_ids(api):
    r = await api.get("/api/v1/workspaces")
    assert r.status_code == 200, r.text
    [ws] = r.json()["workspaces"]
    assert V1_WORKSPACE <= ws.keys()
    assert (ws["id"], ws["name"], ws["immutable"], ws["numProjects"], ws["username"]) == (
        1, "Uncategorized", True, 1, "admin")
    assert r.json()["pagination"]["total"] == 1
    r = await api.get("/api/v1/workspaces/1/projects")
    [project] = r.json()["projects"]
    assert V1_PROJECT <= project.keys()
    assert (project["id"], project["name"], project["workspaceId"], project["workspaceName"]) == (
        1, "Uncategorized", 1, "Uncategorized")
    # Determined's name filter is the whole name in any case; nameCaseSensitive is exact.
    assert len((await api.get("/api/v1/workspaces", params={"name": "uncategorized"})).json()["workspaces"]) == 1
    assert (await api.get("/api/v1/workspaces", params={"name": "uncat"})).json()["workspaces"] == []
    assert (await api.get("/api/v1/workspaces", params={"nameCaseSensitive": "uncategorized"})).json()[
        "workspaces"] == []


async def test_create_describe_list_workspaces_and_projects(api):
    r = await api.post("/api/v1/workspaces", json={"name": "vision", "defaultComputePool": None})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["namespaceBindings"] == {}
    ws = body["workspace"]
    assert (ws["name"], ws["username"], ws["immutable"], ws["numProjects"]) == ("vision", "determined", False, 0)
    r = await api.post(f"/api/v1/workspaces/{ws['id']}/projects",
                       json={"name": "detection", "description": "boxes", "workspaceId": ws["id"]})
    assert r.status_code == 200, r.text
    project = r.json()["project"]
    assert project["key"].startswith("DET") and len(project["key"]) == 5
    assert (project["workspaceName"], project["description"]) == ("vision", "boxes")
    got = (await api.get(f"/api/v1/projects/{project['id']}")).json()["project"]
    assert got["name"] == "detection"
    r = await api.get(f"/api/v1/workspaces/{ws['id']}")
    assert r.json()["workspace"]["numProjects"] == 1
    # Every workspace's projects (id 0), paged.
    r = await api.get("/api/v1/workspaces/0/projects", params={"limit": 1})
    assert len(r.json()["projects"]) == 1 and r.json()["pagination"]["total"] == 2


async def test_names_and_keys_are_unique_and_bad_input_names_the_field(api):
    assert (await api.post("/api/v1/workspaces", json={"name": "Team"})).status_code == 200
    r = await api.post("/api/v1/workspaces", json={"name": "team"})
    assert r.status_code == 409 and "name" in r.json()["message"]
    r = await api.post("/api/v1/workspaces", json={"name": "   "})
    assert r.status_code == 400 and "name" in r.json()["message"]
    r = await api.post("/api/v1/workspaces", json={"name": "x", "checkpointStorageConfig": {"type": "s3"}})
    assert r.status_code == 400 and "checkpointStorageConfig" in r.json()["message"]
    r = await api.post("/api/v1/workspaces/1/projects", json={"name": "a", "key": "toolong"})
    assert r.status_code == 400 and "key" in r.json()["message"]
    assert (await api.post("/api/v1/workspaces/1/projects", json={"name": "a", "key": "abc"})).status_code == 200
    r = await api.post("/api/v1/workspaces/1/projects", json={"name": "b", "key": "ABC"})
    assert r.status_code == 409 and "key" in r.json()["message"]
    r = await api.post("/api/v1/workspaces/1/projects", json={"name": "a"})
    assert r.status_code == 409 and "name" in r.json()["message"]
    assert (await api.post("/api/v1/workspaces/999/projects", json={"name": "a"})).status_code == 404
    r = await api.get("/api/v1/workspaces", params={"userIds": [1, 2**40]})
    assert r.status_code == 400 and "userIds" in r.json()["message"]
    # A NUL byte in a username filter (PostgreSQL refuses it in text: it answered 500, found by the fuzzer).
    for path in ("/api/v1/workspaces", "/api/v1/workspaces/1/projects"):
        r = await api.get(path, params={"users": ["D", "a\x00b"]})
        assert r.status_code == 400 and "users" in r.json()["message"], r.text
    r = await api.get("/api/v1/tokens", params={"tokenIds": [-1]})
    assert r.status_code == 400 and "tokenIds" in r.json()["message"]


async def test_owner_or_admin_changes_and_deletes_viewers_cannot_create(api):
    ws = (await api.post("/api/v1/workspaces", json={"name": "mine"})).json()["workspace"]
    project = (await api.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "p"})).json()["project"]
    other = await new_user(api, "nora", "user")
    viewer = await new_user(api, "vera", "viewer")
    assert (await api.patch(f"/api/v1/workspaces/{ws['id']}", json={"name": "x"}, headers=other)).status_code == 403
    assert (await api.delete(f"/api/v1/projects/{project['id']}", headers=other)).status_code == 403
    assert (await api.post("/api/v1/workspaces", json={"name": "v"}, headers=viewer)).status_code == 403
    assert (await api.post("/api/v1/workspaces/1/projects", json={"name": "v"}, headers=viewer)).status_code == 403
    assert (await api.post("/api/v1/workspaces", json={"name": "noras"}, headers=other)).status_code == 200
    r = await api.patch(f"/api/v1/workspaces/{ws['id']}", json={"name": "renamed"})
    assert r.status_code == 200 and r.json()["workspace"]["name"] == "renamed"
    admin = await admin_headers(api)
    r = await api.patch(f"/api/v1/projects/{project['id']}", json={"description": "d"}, headers=admin)
    assert r.status_code == 200 and r.json()["project"]["description"] == "d"
    # Determined's defaults cannot be renamed or deleted, not even by an admin.
    assert (await api.patch("/api/v1/workspaces/1", json={"name": "z"}, headers=admin)).status_code == 409
    assert (await api.delete("/api/v1/projects/1", headers=admin)).status_code == 409
    r = await api.delete(f"/api/v1/workspaces/{ws['id']}")
    assert r.status_code == 200 and r.json() == {"completed": True}
    assert (await api.get(f"/api/v1/projects/{project['id']}")).status_code == 404


async def test_experiments_go_to_the_named_project_or_are_refused(api):
    ws = (await api.post("/api/v1/workspaces", json={"name": "nlp"})).json()["workspace"]
    project = (await api.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "mt"})).json()["project"]
    exp_id = await create_experiment(api, {**CONFIG, "workspace": "nlp", "project": "mt"})
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert (exp["projectId"], exp["projectName"], exp["workspaceId"], exp["workspaceName"]) == (
        project["id"], "mt", ws["id"], "nlp")
    default_id = await create_experiment(api)
    jobs = {j["full"]["entityId"]: j["full"] for j in (await api.get("/api/v1/job-queues-v2")).json()["jobs"]}
    assert (jobs[str(exp_id)]["workspaceId"], jobs[str(default_id)]["workspaceId"]) == (ws["id"], 1)
    listed = (await api.get("/api/v1/experiments", params={"projectId": project["id"]})).json()["experiments"]
    assert [e["id"] for e in listed] == [exp_id]
    assert (await api.get(f"/api/v1/experiments/{default_id}")).json()["experiment"]["projectName"] == "Uncategorized"
    r = await api.get(f"/api/v1/projects/{project['id']}")
    assert (r.json()["project"]["numExperiments"], r.json()["project"]["numActiveExperiments"]) == (1, 1)
    for config, field in (({**CONFIG, "workspace": "nope", "project": "mt"}, "workspace 'nope'"),
                          ({**CONFIG, "workspace": "nlp", "project": "nope"}, "project 'nope'"),
                          ({**CONFIG, "workspace": "nlp"}, "workspace, project")):
        r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(config), "modelDefinition": []})
        assert r.status_code == 400 and field in r.json()["message"], r.text
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(CONFIG), "modelDefinition": [],
                                                    "projectId": 999})
    assert r.status_code == 400 and "projectId" in r.json()["message"]
    # A workspace or project that holds experiments is not deleted.
    assert (await api.delete(f"/api/v1/projects/{project['id']}")).status_code == 409
    assert (await api.delete(f"/api/v1/workspaces/{ws['id']}")).status_code == 409


async def test_a_nul_byte_in_a_workspace_or_project_name_or_description_is_a_400_naming_the_field(api, caplog):
    """PostgreSQL text cannot hold NUL: these answered 500, and the log printed the SQL parameters."""
    ws = (await api.post("/api/v1/workspaces", json={"name": "nul-test"})).json()["workspace"]
    project = (await api.post(f"/api/v1/workspaces/{ws['id']}/projects", json={"name": "p"})).json()["project"]
    cases = [
        ("POST", "/api/v1/workspaces", {"name": "w\x00"}, "name"),
        ("POST", "/api/v1/workspaces", {"name": "\x00"}, "name"),
        ("PATCH", f"/api/v1/workspaces/{ws['id']}", {"name": "w\x00x"}, "name"),
        ("POST", f"/api/v1/workspaces/{ws['id']}/projects", {"name": "p\x00"}, "name"),
        ("POST", f"/api/v1/workspaces/{ws['id']}/projects", {"name": "q", "description": "d\x00"}, "description"),
        ("PATCH", f"/api/v1/projects/{project['id']}", {"name": "p\x00"}, "name"),
        ("PATCH", f"/api/v1/projects/{project['id']}", {"description": "d\x00"}, "description"),
    ]
    for method, path, body, field in cases:
        r = await api.request(method, path, json=body)
        assert r.status_code == 400 and r.json()["message"].startswith(f"{field}:"), (method, path, r.text)
    assert "internal error" not in caplog.text
    names = [w["name"] for w in (await api.get("/api/v1/workspaces")).json()["workspaces"]]
    assert names == ["Uncategorized", "nul-test"], names
