"""Red team: every task route, called on one user's tasks as each other kind of caller.

The attack: ``determined`` (the owner) has a running trial, a command, a shell, a notebook, a
TensorBoard and an OpenPAI job. ``nora`` (another user), ``vera`` (a viewer), the task token of
admin's trial (another task) and a caller with no credentials each call every route under
``/api/v1/tasks``, ``/task``, ``/commands``, ``/shells``, ``/notebooks``, ``/tensorboards``,
``/user/{username}/jobs`` and ``/pai``, the master's ``/proxy/{id}/`` link and the shell tunnel
(a WebSocket on the same path), with the owner's ids; then the owner and an admin do.

They must fail to: read what is the owner's alone (a task's code, an OpenPAI job's spec, outputs and
SSH key), change anything of the owner's (kill, stop), submit work in the owner's name, get a
proxy ticket to the owner's task, or reach a task's port through the tunnel; nobody ever gets a
5xx. The owner and an admin get what they asked for. Reads every signed-in user may make
(Determined's: lists, a task's summary and its logs) are in the table as such.

The table names every route: one the app serves in these families that the table does not name
fails the test with its name (``test_authorization.py`` walks every route with the general rules;
this one pins each task route's answer per caller).
"""

from __future__ import annotations

import re
from typing import Any

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.api.test_shell_tunnel import closed_with
from tests.controlplane.master.conftest import FakeAgent
from tests.controlplane.master.test_authorization import (
    Call,
    bearer,
    calls_for,
    handlers_of,
    is_webui,
    seed,
    task_headers,
)
from tests.controlplane.master.test_task_proxy import PROXY_PORT, served

FAMILY = re.compile(r"^/(api/v1/(tasks?|commands|shells|notebooks|tensorboards|pai|user/\{username\}/jobs)"
                    r"(/|$)|proxy/)")
OK = tuple(range(200, 300))

# What each kind of route answers each caller; ``None``: any answer but 5xx (and, for a refused
# caller, never 2xx).
REFUSED = (403, 404)  # another user or a viewer on the owner's task
NOT_TASK = (401, 403, 404)  # another task's token
NO_CREDENTIALS = (401,)
KINDS: dict[str, dict[str, tuple[int, ...]]] = {
    # every signed-in user reads (Determined's rule); a task token is not a user
    "read": {"owner": OK, "admin": OK, "other": OK, "viewer": OK, "task": NOT_TASK, "anonymous": NO_CREDENTIALS},
    # the owner's alone: a task's code, an OpenPAI job's spec, outputs, SSH key
    "owner_read": {"owner": OK, "admin": OK, "other": REFUSED, "viewer": REFUSED, "task": NOT_TASK,
                   "anonymous": NO_CREDENTIALS},
    # changes: the owner or an admin (409: already ended by the caller before)
    "owner_change": {"owner": OK + (409,), "admin": OK + (409,), "other": REFUSED, "viewer": REFUSED,
                     "task": NOT_TASK, "anonymous": NO_CREDENTIALS},
    # new work of one's own: any user, not a viewer
    "create": {"owner": OK, "admin": OK, "other": OK, "viewer": REFUSED, "task": NOT_TASK,
               "anonymous": NO_CREDENTIALS},
    # new work in the path's username: one's own name only, an admin's included
    "own_name": {"owner": OK, "admin": (403,), "other": REFUSED, "viewer": REFUSED, "task": NOT_TASK,
                 "anonymous": NO_CREDENTIALS},
    # the master's link: a 303 with a ticket to the task's origin, for the owner or an admin only
    "proxy_link": {"owner": (303,), "admin": (303,), "other": REFUSED, "viewer": REFUSED, "task": NOT_TASK,
                   "anonymous": NO_CREDENTIALS},
}

TABLE: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/tasks"): "read",
    ("GET", "/api/v1/tasks/{task_id}"): "read",
    ("GET", "/api/v1/tasks/{task_id}/logs"): "read",
    ("GET", "/api/v1/tasks/{task_id}/context_directory"): "owner_read",
    ("GET", "/api/v1/tasks/{task_id}/tensorboard/scalars"): "read",  # its experiments' metrics, read by all
    ("POST", "/api/v1/task/logs"): "owner_change",  # lines into the owner's task's log
    **{(m, p.replace("KIND", kind)): k for kind in ("commands", "shells", "notebooks", "tensorboards")
       for m, p, k in (("GET", "/api/v1/KIND", "read"), ("POST", "/api/v1/KIND", "create"),
                       ("GET", "/api/v1/KIND/{command_id}", "read"),
                       ("GET", "/api/v1/KIND/{command_id}/logs", "read"),
                       ("POST", "/api/v1/KIND/{command_id}/kill", "owner_change"))},
    ("POST", "/api/v1/pai/jobs"): "create",
    ("GET", "/api/v1/user/{username}/jobs"): "read",
    ("POST", "/api/v1/user/{username}/jobs"): "own_name",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}"): "read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/logs"): "read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/config"): "owner_read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/ssh"): "owner_read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs"): "owner_read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs/archive"): "owner_read",
    ("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs/file"): "owner_read",
    ("PUT", "/api/v1/user/{username}/jobs/{job_name}/executionType"): "owner_change",
    ("GET", "/proxy/{task_id}"): "proxy_link",
    ("HEAD", "/proxy/{task_id}"): "proxy_link",
    ("GET", "/proxy/{task_id}/{path}"): "proxy_link",
    ("HEAD", "/proxy/{task_id}/{path}"): "proxy_link",
    ("WEBSOCKET", "/proxy/{task_id}"): "tunnel",
    ("WEBSOCKET", "/proxy/{task_id}/{path}"): "tunnel",
}
# Each route is called by every caller in turn, the refused first, so that a kill by the owner
# comes after everyone else's try and the proxy links (first) find the notebook running.
ORDER = ("anonymous", "task", "viewer", "other", "owner", "admin")
# Routes whose answer to the owner or an admin depends on the job's state (outputs exist once it
# ends; the seeded job runs): 404/409 there is no refusal.
NOT_YET = {("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs"),
           ("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs/archive"),
           ("GET", "/api/v1/user/{username}/jobs/{job_name}/outputs/file")}


def family_routes(app) -> set[tuple[str, str]]:
    return {k for k, h in handlers_of(app).items() if FAMILY.match(k[1]) and not is_webui(k[1], h)}


def aimed(calls: list[Call], owner: Any) -> list[Call]:
    """The calls of ``calls_for`` pointed at the task each route is about."""
    out = []
    for call in calls:
        if call.path == "/api/v1/tasks/{task_id}/tensorboard/scalars":  # a TensorBoard's, not the trial's
            call = Call(call.method, call.path, call.url.replace(owner.task_id, owner.commands["tensorboard"]),
                        call.params, call.body, call.action)
        elif call.path.endswith("/outputs/file"):
            call = Call(call.method, call.path, call.url, {**call.params, "task": "main-0", "path": "out.txt"},
                        call.body, call.action)
        out.append(call)
    return out


async def place_the_owners_tasks(api, owner: Any) -> None:
    """An agent with room for the owner's notebook (the seed's agent is full), which the proxy link
    needs placed."""
    agent = FakeAgent(api.rt, slots=8)
    await agent.register()
    started: set[str] = set()
    while owner.commands["notebook"] not in started:
        start = await agent.next_message()
        if isinstance(start, wire.StartTask):
            await agent.start(start)
            started.add(start.task_id)


def proxy_calls(notebook: str) -> list[Call]:
    return [Call(m, p, p.replace("{task_id}", notebook).replace("{path}", "lab"), {}, None, None)
            for m, p in TABLE if p.startswith("/proxy/") and m != "WEBSOCKET"]


async def test_every_task_route_as_each_role(api):
    s = await seed(api)
    app = api._transport.app
    served_routes = family_routes(app)
    unnamed = sorted(f"{m} {p}" for m, p in served_routes - TABLE.keys())
    assert not unnamed, f"task routes with no expected answers in TABLE (add each, with its kind): {unnamed}"
    stale = sorted(f"{m} {p}" for m, p in TABLE.keys() - served_routes)
    assert not stale, f"TABLE names routes the app no longer serves: {stale}"

    owner = s.owners
    await place_the_owners_tasks(api, owner)
    api.rt.proxy_port = PROXY_PORT
    calls = proxy_calls(owner.commands["notebook"])
    calls += aimed([c for c in calls_for(app, owner) if (c.method, c.path) in TABLE], owner)
    assert {(c.method, c.path) for c in calls} == {k for k in TABLE if k[0] != "WEBSOCKET"}
    headers = {"anonymous": {"Authorization": ""}, "task": task_headers(s.admins.task_token),
               "viewer": bearer(s.tokens["vera"]), "other": bearer(s.tokens["nora"]),
               "owner": bearer(s.tokens["determined"]), "admin": bearer(s.admin_token)}
    failures = await tunnel_refusals(app, owner.commands["notebook"], headers)  # while the notebook runs
    for call in calls:
        for role in ORDER:
            kind = TABLE[(call.method, call.path)]
            r = await api.request(call.method, call.url, params=call.params, headers=headers[role],
                                  json=call.body, follow_redirects=False)
            want = KINDS[kind][role]
            if (call.method, call.path) in NOT_YET and role in ("owner", "admin"):
                want = want + (404, 409)
            if r.status_code not in want:
                failures.append(f"{role:9} {call.method} {call.path} ({kind}): {r.status_code}, expected one of "
                                f"{sorted(set(want))[:6]}{'...' if len(set(want)) > 6 else ''}: {r.text[:140]}")
    assert not failures, f"{len(failures)} answer(s) break the table:\n" + "\n".join(failures)


async def tunnel_refusals(app: Any, notebook: str, headers: dict[str, dict[str, str]]) -> list[str]:
    """The shell tunnel (credential-free by design: SSH authenticates) reaches a running shell's
    SSH server and nothing else: on the owner's notebook it is closed for every caller."""
    out = []
    async with served(app) as port:
        for role in ORDER:
            extra = {k: v for k, v in headers[role].items() if v}
            for path in ("/", "/lab"):
                code, reason = await closed_with(f"ws://127.0.0.1:{port}/proxy/{notebook}{path}",
                                                 additional_headers=extra)
                if code != 4404:
                    out.append(f"{role:9} WEBSOCKET /proxy/{{task_id}}{path} (tunnel): closed with {code} {reason!r}, "
                               "expected 4404 (no raw tunnel to a notebook)")
    return out
