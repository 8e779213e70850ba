"""Every route of the served OpenAPI schema, walked as each kind of caller.

Seeded: an experiment of ``admin`` (a running trial, metrics, a checkpoint, a model version) and
one of ``determined`` (an ordinary user, whose running trial supplies the task token). Each walk
substitutes real ids into the path parameters, sends a body built from the schema (or a
meaningful one where the route needs it), and checks the answer against the rules:

- no token: 401 on every route that is not public;
- a viewer: 403 on every mutating route (but login/logout) and on owner-only reads;
- a user acting on someone else's work: 403 likewise (creating one's own work is allowed);
- a user acting on their own work: never 401/403, except admin routes;
- a task token of another trial: 401/403 on everything but the public routes;
- an admin: never 401/403;
- nobody ever gets a 5xx.

All failures of a walk are reported together, so the answer lists every route still missing a check.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from controlplane.master.api.auth_guard import route_action
from controlplane.master.authz import Action
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent

ONE_TRIAL = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}}
MUTATING = {"POST", "PATCH", "PUT", "DELETE"}
SESSION_ROUTES = {("POST", "/api/v1/auth/login"), ("POST", "/api/v1/auth/logout")}
CREATE_ROUTES = {("POST", "/api/v1/experiments"), ("POST", "/api/v1/models"),
                 ("POST", "/api/v1/templates/{template_name}"), ("POST", "/api/v1/workspaces"),
                 ("POST", "/api/v1/workspaces/{workspace_id}/projects"), ("POST", "/api/v1/pai/jobs"),
                 ("POST", "/api/v1/commands"), ("POST", "/api/v1/shells"), ("POST", "/api/v1/notebooks"),
                 ("POST", "/api/v1/tensorboards")}
UNAUTHENTICATED = {Action.PUBLIC, Action.AGENT}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


# ---- the app's routes ------------------------------------------------------------------------
def handlers_of(app) -> dict[tuple[str, str], Any]:
    """(METHOD, path as the OpenAPI schema writes it) -> route handler, for every route but the docs."""
    out = {}
    for route in app.routes:
        handlers = getattr(route, "route_handlers", None) or [route.route_handler]
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        if path == "/docs" or path.startswith("/docs/"):
            continue
        for handler in handlers:
            methods = getattr(handler, "http_methods", None) or {"WEBSOCKET"}
            for method in methods:
                if method != "OPTIONS":
                    out[(method, path)] = handler
    return out


def test_every_route_names_its_action(api):
    app = api._transport.app
    missing = [f"{m} {p}" for (m, p), h in handlers_of(app).items() if route_action(h) is None]
    assert not missing, f"routes without an authorization action (refused to everyone): {missing}"
    schema_ops = {(m.upper(), p) for p, ops in app.openapi_schema.to_schema()["paths"].items() for m in ops}
    routes = {k for k, h in handlers_of(app).items()
              if k[0] != "WEBSOCKET" and not is_webui(k[1], h) and not is_task_proxy(k[1])}
    assert routes - schema_ops == set(), "routes the OpenAPI schema does not describe"


def is_webui(path: str, handler: Any) -> bool:
    """The web UI's pages and static files: HTML for browsers, not part of the API's schema."""
    module = getattr(getattr(handler, "fn", None), "__module__", "") or ""
    return module.startswith("controlplane.master.webui") or path == "/static" or path.startswith("/static/")


def is_task_proxy(path: str) -> bool:
    """``/proxy/{task_id}/...``: a task's own web server (a notebook), not part of the API's schema."""
    return path == "/proxy/{task_id}" or path.startswith("/proxy/{task_id}/")


def test_the_task_proxy_is_a_link_on_the_master_and_signs_in_itself_on_its_own_origin(api):
    """Left out of the schema walk (any method, any path, the task's own answers). On the master,
    ``/proxy/...`` is a GET link (VIEW in the guard; the handler checks the owner before it mints a
    ticket) and a WebSocket that reaches nothing but a running shell's SSH server (PUBLIC: Determined's
    tunnel signs nothing in, SSH authenticates; tests/controlplane/master/api/test_shell_tunnel.py);
    the proxy's own app serves ``/proxy/...`` and nothing else, every handler PUBLIC in the
    guard because it signs callers in itself and checks the owner
    (tests/controlplane/master/test_task_proxy.py)."""
    from controlplane.master.app import create_proxy_app

    master = {k: route_action(h) for k, h in handlers_of(api._transport.app).items() if is_task_proxy(k[1])}
    assert {m for m, _ in master} == {"GET", "HEAD", "WEBSOCKET"}, sorted(master)
    assert {a for (m, _), a in master.items() if m != "WEBSOCKET"} == {Action.VIEW}, master
    assert {a for (m, _), a in master.items() if m == "WEBSOCKET"} == {Action.PUBLIC}, master
    routes = handlers_of(create_proxy_app(api.rt))
    assert all(is_task_proxy(p) for _, p in routes), sorted(routes)
    assert ("POST", "/proxy/{task_id}/{path}") in routes and ("WEBSOCKET", "/proxy/{task_id}/{path}") in routes
    assert {route_action(h) for h in routes.values()} == {Action.PUBLIC}


def test_the_web_ui_changes_nothing_but_through_the_api(api):
    """Its pages only read (what they show goes through the guard as VIEW); the only forms it
    posts itself are sign-in and sign-out, and every change a page makes is an API call, checked
    by the same table as any client's."""
    webui = {k: h for k, h in handlers_of(api._transport.app).items() if is_webui(k[1], h)}
    assert ("GET", "/experiments") in webui and ("GET", "/jobs") in webui, sorted(webui)
    posts = sorted(k for k in webui if k[0] not in ("GET", "HEAD"))
    assert posts == [("POST", "/login"), ("POST", "/logout")], posts
    reads = {k: route_action(h) for k, h in webui.items() if k[0] in ("GET", "HEAD")}
    assert set(reads.values()) <= {Action.VIEW, Action.PUBLIC}, reads


# ---- seeding ---------------------------------------------------------------------------------
@dataclass
class Work:
    """Ids of one user's work, substituted into path parameters."""

    user_id: int
    username: str
    exp_id: int
    trial_id: int
    alloc_id: str
    task_id: str
    job_id: str
    ckpt: str  # registered as version 1 of the model
    spare_ckpt: str  # in no model: free to delete
    model: str
    template: str
    task_token: str
    workspace_id: int
    project_id: int
    pai_job: str
    commands: dict[str, str] = field(default_factory=dict)  # kind (command, shell, ...) -> its id


@dataclass
class Seeded:
    admin_token: str
    tokens: dict[str, str]  # role name -> user token
    admins: Work  # admin's work: someone else's for everybody but the admin
    owners: Work  # determined's work


async def login(api, username: str, password: str = "") -> str:
    r = await api.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, r.text
    return r.json()["token"]


async def seed_work(api, agent: FakeAgent, token: str, username: str, model: str) -> Work:
    import base64

    import yaml

    h = bearer(token)
    files = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode(), "mtime": "0",
              "uid": 0, "gid": 0, "mode": 0o644}]
    r = await api.post("/api/v1/experiments", headers=h, json={
        "config": yaml.safe_dump({**ONE_TRIAL, "name": f"{username}-exp"}), "modelDefinition": files})
    assert r.status_code == 200, r.text
    exp = r.json()["experiment"]
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    task = task_headers(start.session_token)
    trial_id = int(start.env["DET_TRIAL_ID"])
    metrics = {"group": "validation", "metrics": {"stepsCompleted": 5, "metrics": {"avgMetrics": {"loss": 0.5}}}}
    r = await api.post(f"/api/v1/trials/{trial_id}/metrics", headers=task, json=metrics)
    assert r.status_code == 200, r.text
    ckpt, spare = str(uuid.uuid4()), str(uuid.uuid4())
    for steps, name in enumerate((ckpt, spare), start=4):
        r = await api.post("/api/v1/checkpoints", headers=task, json={
            "uuid": name, "taskId": start.task_id, "allocationId": start.allocation_id, "state": "STATE_COMPLETED",
            "resources": {"state.pt": "10"}, "metadata": {"steps_completed": steps}, "training": {}})
        assert r.status_code == 200, r.text
    assert (await api.post("/api/v1/models", headers=h, json={"name": model})).status_code == 200
    r = await api.post(f"/api/v1/models/{model}/versions", headers=h, json={"checkpointUuid": ckpt})
    assert r.status_code == 200, r.text
    template = f"{username}-template"
    r = await api.post(f"/api/v1/templates/{template}", headers=h, json={"config": {"max_restarts": 2}})
    assert r.status_code == 200, r.text
    r = await api.post("/api/v1/workspaces", headers=h, json={"name": f"{username}-workspace"})
    assert r.status_code == 200, r.text
    workspace_id = r.json()["workspace"]["id"]
    r = await api.post(f"/api/v1/workspaces/{workspace_id}/projects", headers=h, json={"name": "project"})
    assert r.status_code == 200, r.text
    project_id = r.json()["project"]["id"]
    me = (await api.get("/api/v1/me", headers=h)).json()["user"]
    return Work(pai_job=f"{username}-job", workspace_id=workspace_id, project_id=project_id,
                user_id=me["id"], username=username, exp_id=exp["id"], trial_id=trial_id,
                alloc_id=start.allocation_id, task_id=start.task_id, job_id=exp["jobId"], ckpt=ckpt, spare_ckpt=spare,
                model=model, template=template, task_token=start.session_token)


def pai_job_json(name: str) -> dict:
    return {"jobName": name, "image": "default", "taskRoles": [
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 0, "command": "true"}]}


async def seed(api) -> Seeded:
    admin = await login(api, "admin")
    tokens = {}
    for name, role in (("nora", "user"), ("vera", "viewer")):
        r = await api.post("/api/v1/users", headers=bearer(admin),
                           json={"user": {"username": name, "role": role}, "password": "pw", "isHashed": False})
        assert r.status_code == 200, r.text
        tokens[name] = await login(api, name, "pw")
    tokens["determined"] = api.headers["Authorization"].removeprefix("Bearer ")
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    admins = await seed_work(api, agent, admin, "admin", "admins-model")
    owners = await seed_work(api, agent, tokens["determined"], "determined", "owners-model")
    for work, token in ((admins, admin), (owners, tokens["determined"])):  # after the trials: its task may start
        r = await api.post(f"/api/v1/user/{work.username}/jobs", headers=bearer(token), json=pai_job_json(work.pai_job))
        assert r.status_code == 202, r.text
        for kind in ("command", "shell", "notebook", "tensorboard"):
            body = {"config": {"entrypoint": "true"}, **({"experimentIds": [work.exp_id]} if kind == "tensorboard"
                                                         else {})}
            r = await api.post(f"/api/v1/{kind}s", headers=bearer(token), json=body)
            assert r.status_code == 200, r.text
            work.commands[kind] = r.json()[kind]["id"]
    return Seeded(admin, tokens, admins, owners)


# ---- requests from the schema ----------------------------------------------------------------
def path_values(work: Work) -> dict[str, str]:
    return {
        "user_id": str(work.user_id), "username": work.username, "exp_id": str(work.exp_id),
        "experiment_id": str(work.exp_id), "trial_id": str(work.trial_id), "run_id": str(work.trial_id),
        "alloc_id": work.alloc_id, "allocation_id": work.alloc_id, "resources_id": "0", "task_id": work.task_id,
        "agent_id": "agent-1", "ckpt_uuid": work.ckpt, "checkpoint_uuid": work.ckpt, "pool_name": "default",
        "resource_pool": "default", "name": work.model, "model_name": work.model, "number": "1",
        "version": "1", "job_id": work.job_id, "template_name": work.template, "label": "needs-review",
        "workspace_id": str(work.workspace_id), "project_id": str(work.project_id), "slot_id": "0",
        "job_name": work.pai_job,
    }


def special_body(method: str, path: str, work: Work) -> Any:
    """Bodies that must name the seeded work for the request to mean something."""
    metric = {"stepsCompleted": 6, "metrics": {"avgMetrics": {"loss": 0.4}}}
    return {
        ("DELETE", "/api/v1/checkpoints"): {"checkpointUuids": [work.spare_ckpt]},
        ("POST", "/api/v1/checkpoints/rm"): {"checkpointUuids": [work.spare_ckpt], "checkpointGlobs": ["*.tmp"]},
        ("POST", "/api/v1/experiments/{exp_id}/move"): {"destinationProjectId": work.project_id},
        ("POST", "/api/v1/experiments/continue"): {"id": work.exp_id},
        ("POST", "/api/v1/checkpoints/{checkpoint_uuid}/metadata"): {
            "checkpoint": {"uuid": work.ckpt, "metadata": {"steps_completed": 4, "note": "kept"}}},
        ("POST", "/api/v1/checkpoints"): {
            "uuid": str(uuid.uuid4()), "taskId": work.task_id, "allocationId": work.alloc_id,
            "state": "STATE_COMPLETED", "resources": {}, "metadata": {"steps_completed": 6},
            "training": {"trialId": work.trial_id}},
        ("POST", "/api/v1/models/{name}/versions"): {"checkpointUuid": work.ckpt},
        ("POST", "/api/v1/job-queues"): {"updates": [{"jobId": work.job_id, "priority": 10}]},
        ("POST", "/api/v1/task/logs"): {"logs": [{"taskId": work.task_id, "allocationId": work.alloc_id,
                                                  "log": "line", "stdtype": "stdout", "source": "task"}]},
        ("POST", "/api/v1/trials/{trial_id}/metrics"): {"group": "training", "metrics": metric},
        ("POST", "/api/v1/trials/{trial_id}/metrics/batch"): {"reports": [{"group": "training", **metric}]},
        ("POST", "/api/v1/trials/{trial_id}/training_metrics"): {"trainingMetrics": metric},
        ("POST", "/api/v1/trials/{trial_id}/validation_metrics"): {"validationMetrics": metric},
        ("POST", "/api/v1/runs/start"): {"runId": work.trial_id},
        ("POST", "/api/v1/trials/{trial_id}/early_exit"): {"reason": "EXITED_REASON_INVALID_HP"},
        ("POST", "/api/v1/users/{user_id}/password"): {"password": "", "oldPassword": "", "isHashed": False},
        ("POST", "/api/v1/auth/login"): {"username": "nobody", "password": "x"},
        ("POST", "/api/v1/user/{username}/jobs"): pai_job_json(f"job-{uuid.uuid4().hex[:8]}"),
        ("POST", "/api/v1/pai/jobs"): {"job": pai_job_json(f"job-{uuid.uuid4().hex[:8]}")},
        ("PUT", "/api/v1/user/{username}/jobs/{job_name}/executionType"): {"value": "STOP"},
        ("POST", "/api/v1/commands"): {"config": {"entrypoint": "true"}},
        ("POST", "/api/v1/tensorboards"): {"experimentIds": [work.exp_id]},
    }.get((method, path))


def fallback_body(method: str, path: str) -> Any:
    """For routes whose schema does not describe their body yet."""
    return {
        ("PATCH", "/api/v1/experiments/{exp_id}"): {"name": "renamed"},
        ("PATCH", "/api/v1/models/{name}"): {"description": "changed"},
        ("PATCH", "/api/v1/models/{name}/versions/{number}"): {"comment": "changed"},
        ("POST", "/api/v1/trials/{trial_id}/progress"): 0.5,
        ("POST", "/api/v1/trials/{trial_id}/runner/metadata"): {"metadata": {"state": "training"}},
        ("POST", "/api/v1/agents/{agent_id}/disable"): {"drain": True},
    }.get((method, path), {} if method in MUTATING else None)


QUERY = {"timeout_seconds": "0", "timeoutSeconds": "0", "follow": "false"}


def sample(schema: dict, components: dict, depth: int = 0) -> Any:
    """A small value the schema accepts: required fields only, the lowest allowed numbers."""
    if depth > 8:
        return None
    if "$ref" in schema:
        return sample(components[schema["$ref"].rsplit("/", 1)[1]], components, depth + 1)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            objects = [s for s in options if s.get("type") == "object" or "$ref" in s]
            return sample((objects or options or [{}])[0], components, depth + 1)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: sample(props.get(k, {}), components, depth + 1) for k in schema.get("required", [])}
    if kind == "array":
        return []
    if kind == "integer":
        return max(int(schema.get("minimum", 1)), 1)
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return False
    if kind == "string":
        return "x" * max(int(schema.get("minLength", 1)), 1)
    return {}


@dataclass
class Call:
    method: str
    path: str  # as in the schema
    url: str
    params: dict
    body: Any
    action: Action | None


def calls_for(app, work: Work) -> list[Call]:
    schema = app.openapi_schema.to_schema()
    components = schema.get("components", {}).get("schemas", {})
    handlers = handlers_of(app)
    values = path_values(work)
    out = []
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            method = method.upper()
            url = path
            if "{command_id}" in path:  # /api/v1/{commands,shells,notebooks}/{command_id}: that kind's
                values["command_id"] = work.commands[path.split("/")[3].removesuffix("s")]
            for name in re.findall(r"\{(\w+)\}", path):
                assert name in values, f"no sample value for path parameter {name} of {method} {path}: add one"
                url = url.replace("{" + name + "}", values[name])
            query = {**QUERY, "trialIds": str(work.trial_id), "group": "validation"}
            params = {p["name"]: query[p["name"]] for p in op.get("parameters", [])
                      if p.get("in") == "query" and p["name"] in query}
            body = special_body(method, path, work)
            if body is None and "requestBody" in op:
                content = op["requestBody"].get("content", {})
                media = content.get("application/json") or next(iter(content.values()), {})
                body = sample(media.get("schema", {}), components)
            if body is None:
                body = fallback_body(method, path)
            handler = handlers.get((method, path))
            out.append(Call(method, path, url, params, body, route_action(handler) if handler else None))
    return out


async def walk(api, calls: list[Call], headers: dict, expect) -> list[str]:
    """Every call with these headers; ``expect(call, status)`` returns a complaint or None."""
    failures = []
    for call in calls:
        if (call.method, call.path) == ("POST", "/api/v1/auth/logout"):
            headers_now = {"Authorization": ""}  # would end the session the rest of the walk uses
        else:
            headers_now = headers
        r = await api.request(call.method, call.url, params=call.params, headers=headers_now,
                              json=call.body if call.body is not None else None)
        status = r.status_code
        complaint = f"answered {status}: {r.text[:160]}" if status >= 500 else expect(call, status)
        if complaint and status == 400:
            complaint += f" ({r.json().get('message', '')[:160]})"
        if complaint:
            failures.append(f"{call.method} {call.path}: {complaint}")
    return failures


def refuses(call: Call, status: int, want: tuple[int, ...], why: str) -> str | None:
    return None if status in want else f"{why}, got {status}"


# ---- the walks -------------------------------------------------------------------------------
def anonymous(call: Call, status: int) -> str | None:
    if call.action in UNAUTHENTICATED:
        return None
    return refuses(call, status, (401,), "needs a token (401)")


def viewer(call: Call, status: int) -> str | None:
    if (call.method, call.path) in SESSION_ROUTES or call.action in UNAUTHENTICATED:
        return None
    if call.method in MUTATING or call.action in (Action.READ_OWN, Action.ADMINISTER):
        return refuses(call, status, (403,), "a viewer may not change anything or read owner- or admin-only data (403)")
    return refuses(call, status, tuple(range(200, 300)) + (404, 409), "a viewer may read (2xx)")


def non_owner(call: Call, status: int) -> str | None:
    if (call.method, call.path) in SESSION_ROUTES | CREATE_ROUTES or call.action in UNAUTHENTICATED:
        return None
    if call.method in MUTATING or call.action is Action.READ_OWN:
        return refuses(call, status, (403,), "someone else's work: owner or admin only (403)")
    return None


def owner(call: Call, status: int) -> str | None:
    if (call.method, call.path) in SESSION_ROUTES:
        return None
    if call.action is Action.ADMINISTER:
        return refuses(call, status, (403,), "admin only (403)")
    if status in (401, 403):
        return f"the owner was refused ({status})"
    return None


def other_task(call: Call, status: int) -> str | None:
    if call.action in UNAUTHENTICATED:
        return None
    return refuses(call, status, (401, 403), "another trial's task token (401/403)")


def admin(call: Call, status: int) -> str | None:
    if (call.method, call.path) in SESSION_ROUTES:
        return None
    return f"an admin was refused ({status})" if status in (401, 403) else None


ROLES = ["anonymous", "viewer", "non_owner", "task_token", "owner", "admin"]


@pytest.mark.parametrize("role", ROLES)
async def test_every_route_as_each_role(api, role):
    s = await seed(api)
    app = api._transport.app
    if role == "anonymous":
        failures = await walk(api, calls_for(app, s.admins), {"Authorization": ""}, anonymous)
    elif role == "viewer":
        failures = await walk(api, calls_for(app, s.admins), bearer(s.tokens["vera"]), viewer)
    elif role == "non_owner":
        failures = await walk(api, calls_for(app, s.admins), bearer(s.tokens["nora"]), non_owner)
    elif role == "task_token":
        failures = await walk(api, calls_for(app, s.admins), task_headers(s.owners.task_token), other_task)
    elif role == "owner":
        failures = await walk(api, calls_for(app, s.owners), bearer(s.tokens["determined"]), owner)
    else:
        failures = await walk(api, calls_for(app, s.admins), bearer(s.admin_token), admin)
    assert not failures, f"{len(failures)} route(s) break the rules for {role}:\n" + "\n".join(failures)
