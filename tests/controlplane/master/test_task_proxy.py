"""The master's proxy to a task's web server (``/proxy/{task_id}/...``), against real servers on
127.0.0.1 that a test resolver names as tasks owned by the signed-in user ``determined``: the
master's link (a one-time ticket to the task's own host on the proxy's listener, for a bearer token
or a person's own navigation only) and the proxy's sign-in (the ticket's cookie, a bearer token,
never the master's session cookie, on the task's own host only); what passes through (status,
body, headers, the path as written, plus the task's secret), what never does (the user's token,
the session cookies, a task's cookies beyond its host), who is refused (401, 403, 404, 421) and
what a dead or silent task answers (502, 504); WebSocket frames both ways through the proxy served
by uvicorn; and the activity clock."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin, Subprotocol

from controlplane.master import browser_session as webui_session
from controlplane.master import proxy_sessions as svc
from controlplane.master import task_hosts
from controlplane.master.api import task_proxy as proxy_api
from controlplane.master.app import create_proxy_app
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_ownership import add_user, login
from tests.controlplane.master.test_task_tokens import task_headers

OWNED = "nb-owned"  # an HTTP task of determined's
SOCKET = "nb-socket"  # a WebSocket echo task of determined's
DOWN = "nb-down"  # nothing listens on its port
SILENT = "nb-silent"  # accepts connections, never answers
SECRET = ("Authorization", "token the-tasks-secret")  # what OWNED's and SOCKET's targets add
PROXY_PORT = 18099  # where the master's links send browsers (no listener: the tests call the app)
# What a browser sends: a top-level navigation typed or from the master's own pages.
NAVIGATION = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


def host_of(task_id: str) -> str:
    """A task's own host on the proxy's listener (``<label>.<the host the master was reached by>``)."""
    return f"{task_hosts.task_label(task_id)}.proxy"


async def on_task_host(request: httpx.Request) -> None:
    """An httpx hook: a request to ``/proxy/<id>/...`` on the plain ``proxy`` host goes to that
    task's own host instead, as a browser sent there by the master's link would."""
    parts = request.url.path.split("/")
    if request.headers.get("host") == "proxy" and len(parts) > 2 and parts[1] == "proxy":
        request.headers["host"] = host_of(parts[2])


# ---- the task's side -------------------------------------------------------------------------
@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


class TaskHandler(BaseHTTPRequestHandler):
    """Answers every method with what it received; ``/status/N`` answers status N."""

    protocol_version = "HTTP/1.1"
    server: TaskServer

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunk = self.rfile.read(size + 2)[:size]
                if size == 0:
                    return out
                out += chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self) -> None:
        body = self._body()
        self.server.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
        if self.path.endswith("/slow"):
            self._slow()
            return
        status = int(self.path.split("/status/")[1].split("?")[0]) if "/status/" in self.path else 200
        answer = {"method": self.command, "path": self.path, "body": body.decode(errors="replace")}
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Task", "yes")
        self.send_header("Set-Cookie", "a=1; Path=/")
        self.send_header("Set-Cookie", "b=2")
        # What the proxy drops: anything that reaches beyond the task's own host, or could shadow
        # a cookie of the master's.
        for hostile in (f"{webui_session.COOKIE}=planted; Path=/", "det_csrf=x; Path=/api",
                        f"{proxy_api.PROXY_COOKIE}=x", "__Host-det_session=x; Secure; Path=/",
                        "__Secure-anything=x; Secure", "wide=1; Domain=proxy; Path=/", "wide2=1; path=/; domain=.x"):
            self.send_header("Set-Cookie", hostile)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _slow(self) -> None:
        """Chunked: "first" now, "last" once the test lets it go."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"5\r\nfirst\r\n")
        self.wfile.flush()
        self.server.release.wait(10)
        self.wfile.write(b"4\r\nlast\r\n0\r\n\r\n")
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    def log_message(self, *args: object) -> None:
        pass


class TaskServer(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[Seen]
    release: threading.Event


@dataclass
class Tasks:
    http: TaskServer
    ws_seen: list[tuple[str, list[tuple[str, str]], str | None]] = field(default_factory=list)

    @property
    def seen(self) -> list[Seen]:
        return self.http.seen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_task() -> Iterator[TaskServer]:
    server = TaskServer(("127.0.0.1", 0), TaskHandler)
    server.seen = []
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
async def proxy(api) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the proxy's own listener (its app over the test's runtime), signed in as
    ``determined`` by a bearer token; ``proxy.app`` is the app."""
    app = create_proxy_app(api.rt)
    api.rt.proxy_port = PROXY_PORT
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=cast(Any, app)), base_url="http://proxy",
                                 headers={"Authorization": api.headers["Authorization"]}, timeout=30,
                                 event_hooks={"request": [on_task_host]}) as client:
        client.app = app  # type: ignore[attr-defined]
        try:
            yield client
        finally:
            await proxy_api.close_client(app)


@pytest.fixture
async def tasks(api, http_task) -> AsyncIterator[Tasks]:
    """Four tasks of determined's, found by a resolver registered for the test only."""
    me = (await api.get("/api/v1/me")).json()["user"]["id"]
    out = Tasks(http_task)

    async def echo(conn: ServerConnection) -> None:
        assert conn.request is not None
        out.ws_seen.append((conn.request.path, list(conn.request.headers.raw_items()), conn.subprotocol))
        try:
            async for message in conn:
                if message == "close-please":
                    await conn.close(code=4321, reason="asked to")
                    return
                await conn.send(message)
        except ConnectionClosed:
            pass

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog; nobody ever reads them
    def pick(conn: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
        return Subprotocol("v1.test") if "v1.test" in offered else None

    async with ws_serve(echo, "127.0.0.1", 0, select_subprotocol=pick) as ws_server:
        ws_port = ws_server.sockets[0].getsockname()[1]
        targets = {
            OWNED: svc.ProxyTarget(me, "127.0.0.1", http_task.server_address[1], "/base", (SECRET,)),
            SOCKET: svc.ProxyTarget(me, "127.0.0.1", ws_port, f"/proxy/{SOCKET}", (SECRET,)),
            DOWN: svc.ProxyTarget(me, "127.0.0.1", free_port(), ""),
            SILENT: svc.ProxyTarget(me, "127.0.0.1", silent.getsockname()[1], ""),
        }

        async def resolver(session, task_id: str) -> svc.ProxyTarget | None:
            return targets.get(task_id)

        api.rt.proxy.add_resolver(resolver)
        try:
            yield out
        finally:
            api.rt.proxy.remove_resolver(resolver)
            for task_id in targets:
                api.rt.proxy.forget(task_id)
            silent.close()


def token_of(api) -> str:
    return api.headers["Authorization"].removeprefix("Bearer ")


async def me_of(api) -> int:
    """The signed-in user's id (``determined``'s)."""
    return (await api.get("/api/v1/me")).json()["user"]["id"]


# ---- HTTP ------------------------------------------------------------------------------------
async def test_get_passes_through_with_status_body_and_headers(api, proxy, tasks):
    r = await proxy.get(f"/proxy/{OWNED}/files/a%20b//c.txt", params={"x": "1", "y": "a/b"},
                      headers={"X-Custom": "kept", "Cookie": "jupyter=1"})
    assert r.status_code == 200, r.text
    assert r.json() == {"method": "GET", "path": "/base/files/a%20b//c.txt?x=1&y=a%2Fb", "body": ""}
    assert r.headers["x-task"] == "yes"
    assert r.headers["content-type"] == "application/json"
    assert r.headers["content-security-policy"] == "frame-ancestors 'self'"  # no master page frames it
    # The task's own host-only cookies; none that names the master's, has a prefix or a Domain.
    assert r.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2"]
    seen = tasks.seen[-1]
    assert seen.header("X-Custom") == ["kept"]
    assert seen.header("Cookie") == ["jupyter=1"]
    assert seen.header("Authorization") == [SECRET[1]]  # the task's secret, never the user's token
    assert seen.header("X-Forwarded-Proto") == ["http"]
    assert seen.header("Host") == [host_of(OWNED)]  # the host the browser asked for, as Go's proxy keeps it


async def test_post_put_delete_pass_through_with_their_bodies(api, proxy, tasks):
    r = await proxy.post(f"/proxy/{OWNED}/status/201", content=b"\x00payload\xff" * 1000,
                       headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    assert tasks.seen[-1].method == "POST" and tasks.seen[-1].body == b"\x00payload\xff" * 1000
    assert tasks.seen[-1].header("Content-Type") == ["application/octet-stream"]

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"one,", b"two,", b"three"):
            yield part

    r = await proxy.put(f"/proxy/{OWNED}/api/contents", content=chunks())  # chunked: no Content-Length
    assert r.status_code == 200, r.text
    assert r.json()["body"] == "one,two,three"
    r = await proxy.delete(f"/proxy/{OWNED}/api/x")
    assert r.status_code == 200 and r.json()["method"] == "DELETE"
    r = await proxy.head(f"/proxy/{OWNED}/x")
    assert r.status_code == 200 and r.content == b"" and r.headers["x-task"] == "yes"


async def browser_on_proxy(api, proxy, path: str) -> str:
    """What a browser signed in to the master does: follow the master's link for ``path`` to the
    task's host, which sets its cookie; the value of that cookie."""
    token = token_of(api)
    cookie = {"Authorization": "", "Cookie": f"{webui_session.COOKIE}={token}", "Accept": "text/html", **NAVIGATION}
    link = await api.get(path, headers=cookie)
    assert link.status_code == 303, link.text
    location = link.headers["location"]
    task_id = path.split("/")[2]
    own = f"http://{task_hosts.task_label(task_id)}.master:{PROXY_PORT}"  # the task's own origin
    assert location.startswith(f"{own}{path}?{proxy_api.TICKET_PARAM}="), location
    assert link.headers["referrer-policy"] == "no-referrer"
    ticket = location.partition("?")[2]
    r = await proxy.get(f"{path}?{ticket}", headers={"Authorization": ""})
    assert r.status_code == 303 and r.headers["location"] == path, r.text
    set_cookie = r.headers["set-cookie"]
    assert set_cookie.startswith(f"{proxy_api.PROXY_COOKIE}=") and "HttpOnly" in set_cookie, set_cookie
    assert f"Path={path.rsplit('/', 1)[0]}/;" in set_cookie and "samesite=strict" in set_cookie.lower(), set_cookie
    # The ticket is good once.
    again = await proxy.get(f"{path}?{ticket}", headers={"Authorization": ""})
    assert again.status_code == 401 and "open it from the master again" in again.json()["message"]
    return set_cookie.split(";")[0].partition("=")[2]


async def test_the_masters_link_signs_a_browser_in_to_the_proxys_origin_once(api, proxy, tasks):
    token = token_of(api)
    session = await browser_on_proxy(api, proxy, f"/proxy/{OWNED}/tree")
    assert session != token
    browser = {"Authorization": "", "Cookie": f"{proxy_api.PROXY_COOKIE}={session}; jupyter-xsrf=abc; "
                                              f"{webui_session.COOKIE}={token}"}
    r = await proxy.get(f"/proxy/{OWNED}/tree", headers=browser)
    assert r.status_code == 200, r.text
    # A state change needs a page of the task's own origin (Origin), as browsers send it.
    r = await proxy.post(f"/proxy/{OWNED}/api/sessions", json={"kernel": "python3"},
                         headers={**browser, "Origin": f"http://{host_of(OWNED)}"})
    assert r.status_code == 200, r.text
    r = await proxy.post(f"/proxy/{OWNED}/api/sessions", json={}, headers={**browser, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "task's own origin" in r.json()["message"], r.text
    # The proxy cookie is good for its own task only.
    r = await proxy.get(f"/proxy/{SOCKET}/x", headers={"Authorization": "",
                                                        "Cookie": f"{proxy_api.PROXY_COOKIE}={session}"})
    assert r.status_code == 401, r.text
    # A client of the API: the bearer token.
    r = await proxy.get(f"/proxy/{OWNED}/api/status")
    assert r.status_code == 200, r.text
    assert len(tasks.seen) == 3
    for seen in tasks.seen:
        everything = " ".join(f"{k}: {v}" for k, v in seen.headers)
        assert token not in everything and session not in everything, seen.headers
        assert seen.header("Authorization") == [SECRET[1]]
    assert tasks.seen[0].header("Cookie") == ["jupyter-xsrf=abc"]
    assert tasks.seen[1].body == b'{"kernel":"python3"}'
    # Signing out of the master ends the proxy session too.
    assert (await api.post("/api/v1/auth/logout")).status_code == 200
    r = await proxy.get(f"/proxy/{OWNED}/tree", headers=browser)
    assert r.status_code == 401, r.text


async def test_the_masters_link_mints_a_ticket_only_for_a_persons_own_navigation(api, proxy, tasks):
    """Signed in by the cookie, only a top-level navigation typed or from the master's own pages
    gets a ticket (Fetch Metadata); a task's page fetching, framing or opening the link gets 403."""
    path = f"/proxy/{OWNED}/tree"
    cookie = {"Authorization": "", "Cookie": f"{webui_session.COOKIE}={token_of(api)}", "Accept": "text/html"}
    for site in ("none", "same-origin"):
        r = await api.get(path, headers={**cookie, **NAVIGATION, "Sec-Fetch-Site": site})
        assert r.status_code == 303 and proxy_api.TICKET_PARAM in r.headers["location"], (site, r.text)
    r = await api.get(path)  # an API client's bearer token: browsers never send it by themselves
    assert r.status_code == 303 and proxy_api.TICKET_PARAM in r.headers["location"], r.text
    minted = len(api.rt.proxy.tickets)
    for what, fetch_metadata, why in (
            ("no Fetch Metadata", {}, "no Fetch Metadata"),
            ("a task page's fetch", {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors",
                                     "Sec-Fetch-Dest": "empty"}, "only a top-level navigation"),
            ("an iframe", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"},
             "only a top-level navigation"),
            ("a same-origin fetch", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors",
                                     "Sec-Fetch-Dest": "empty"}, "only a top-level navigation")):
        r = await api.get(path, headers={**cookie, **fetch_metadata})
        assert r.status_code == 403 and why in r.json()["message"], (what, r.text)
    # A top-level navigation from another page (a task's window.open or form): 403, with a link the
    # person may follow from this page themselves.
    for site in ("same-site", "cross-site"):
        r = await api.get(f"{path}?a=1", headers={**cookie, **NAVIGATION, "Sec-Fetch-Site": site})
        assert r.status_code == 403 and r.headers["content-type"].startswith("text/html"), r.text
        assert f'href="{path}?a=1"' in r.text and "from another page" in r.text, r.text
        assert r.headers["x-frame-options"] == "DENY"
    assert len(api.rt.proxy.tickets) == minted  # none minted for them


async def test_a_ticket_or_cookie_is_good_on_its_tasks_own_host_only(api, proxy, tasks):
    """A ticket for one task brought to another task's host (whose page would then read it) is
    refused there (421) without being used up; a cookie-signed request that another site's page
    made is refused; the task's cookies never name the master's."""
    link = await api.get(f"/proxy/{OWNED}/x")
    ticket = link.headers["location"].partition("?")[2]
    r = await proxy.get(f"/proxy/{OWNED}/x?{ticket}", headers={"Authorization": "", "Host": host_of(SOCKET)})
    assert r.status_code == 421 and "host of its own" in r.json()["message"], r.text
    assert "set-cookie" not in r.headers
    r = await proxy.get(f"/proxy/{OWNED}/x", headers={"Host": f"127.0.0.1:{PROXY_PORT}"})  # no task's host
    assert r.status_code == 421, r.text
    r = await proxy.get(f"/proxy/{OWNED}/x?{ticket}", headers={"Authorization": ""})  # its own host
    assert r.status_code == 303, r.text
    session = r.headers["set-cookie"].split(";")[0]
    own = {"Authorization": "", "Cookie": session}
    r = await proxy.get(f"/proxy/{OWNED}/x", headers={**own, "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors",
                                                        "Sec-Fetch-Dest": "empty"})
    assert r.status_code == 403 and "top-level navigation" in r.json()["message"], r.text
    r = await proxy.get(f"/proxy/{OWNED}/x", headers={**own, **NAVIGATION, "Sec-Fetch-Site": "same-site"})
    assert r.status_code == 200, r.text  # a link the person followed from the master
    # Of two proxy cookies (one tossed in by another task's page), the one for this task counts.
    tossed = {"Authorization": "", "Cookie": f"{proxy_api.PROXY_COOKIE}=tossed; {session}"}
    assert (await proxy.get(f"/proxy/{OWNED}/x", headers=tossed)).status_code == 200
    assert [s.path for s in tasks.seen] == ["/base/x", "/base/x"]


def test_a_tasks_cookies_stay_on_its_own_host():
    allowed = proxy_api.task_cookie_allowed
    assert allowed("_xsrf=abc; Path=/proxy/x/") and allowed("username-x=1; HttpOnly; SameSite=Lax")
    for hostile in ("det_session=x; Path=/api", "DET_CSRF=x", "det_proxy=x; Path=/proxy/y/", "det_anything=1",
                    "__Host-det_session=x; Secure; Path=/", "__Secure-x=1; Secure", "__host-x=1",
                    "a=1; Domain=example.com", "a=1; path=/; domain=.tasks.example.com", "a=1;Domain=x"):
        assert not allowed(hostile), hostile


async def test_the_masters_session_cookie_is_no_credential_on_the_proxy(api, proxy, tasks):
    token = token_of(api)
    r = await proxy.get(f"/proxy/{OWNED}/tree", headers={"Authorization": "",
                                                          "Cookie": f"{webui_session.COOKIE}={token}"})
    assert r.status_code == 401, r.text
    # Nor does the master serve a task any more: only its link, and only to GET.
    assert (await api.post(f"/proxy/{OWNED}/api/x", json={})).status_code == 405
    assert not tasks.seen
    api.rt.proxy_port = None
    r = await api.get(f"/proxy/{OWNED}/tree")
    assert r.status_code == 503 and "proxy_port" in r.json()["message"], r.text


async def test_a_bare_task_path_redirects_to_its_slash(api, proxy, tasks):
    r = await proxy.get(f"/proxy/{OWNED}", params={"a": "1"})
    assert r.status_code == 307
    assert r.headers["location"] == f"/proxy/{OWNED}/?a=1"
    r = await proxy.get(f"/proxy/{OWNED}/")
    assert r.status_code == 200 and r.json()["path"] == "/base/"


async def test_only_the_owner_or_an_admin_may_use_a_task(api, proxy, tasks):
    nora = await add_user(api, "nora")
    r = await proxy.get(f"/proxy/{OWNED}/tree", headers=nora)
    assert r.status_code == 403, r.text
    assert f"task {OWNED}" in r.json()["message"]
    r = await proxy.post(f"/proxy/{OWNED}/api/x", headers=nora, json={})
    assert r.status_code == 403, r.text
    vera = await add_user(api, "vera", role="viewer")
    assert (await proxy.get(f"/proxy/{OWNED}/tree", headers=vera)).status_code == 403
    assert not tasks.seen, "a refused request reached the task"
    admin = await login(api, "admin")
    assert (await proxy.get(f"/proxy/{OWNED}/tree", headers=admin)).status_code == 200


async def test_no_token_is_401_and_a_browser_is_sent_to_sign_in(api, proxy, tasks):
    r = await proxy.get(f"/proxy/{OWNED}/tree", headers={"Authorization": ""})
    assert r.status_code == 401, r.text
    # A browser is sent to the master's link, which signs it in here (or sends it to sign in).
    r = await proxy.get(f"/proxy/{OWNED}/tree?a=1", headers={"Authorization": "", "Accept": "text/html"})
    assert r.status_code == 303 and r.headers["location"] == f"http://proxy:8080/proxy/{OWNED}/tree?a=1"
    r = await api.get(f"/proxy/{OWNED}/tree", headers={"Authorization": "", "Accept": "text/html"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    assert not tasks.seen


async def test_a_task_token_is_refused(api, proxy, tasks):
    """A training process's allocation token is good for its own trial's routes, never the proxy."""
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1}})
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    for task_id in (OWNED, start.task_id):
        r = await api.get(f"/proxy/{task_id}/tree", headers=task_headers(start.session_token))
        assert r.status_code == 403, r.text  # the master's link
        r = await proxy.get(f"/proxy/{task_id}/tree",
                            headers={"Authorization": "", **task_headers(start.session_token)})
        assert r.status_code == 401, r.text  # the proxy's origin knows no task tokens
    assert not tasks.seen


async def test_an_unknown_task_is_404_naming_it(api, proxy, tasks):
    r = await proxy.get("/proxy/no-such-task/tree")
    assert r.status_code == 404, r.text
    assert "task no-such-task" in r.json()["message"]


async def test_a_task_that_is_down_is_502_and_a_silent_one_504(api, proxy, tasks, monkeypatch):
    r = await proxy.get(f"/proxy/{DOWN}/tree")
    assert r.status_code == 502, r.text
    assert f"task {DOWN}" in r.json()["message"]
    monkeypatch.setattr(proxy_api, "READ_TIMEOUT_S", 0.3)
    r = await proxy.get(f"/proxy/{SILENT}/tree")
    assert r.status_code == 504, r.text
    assert f"task {SILENT}" in r.json()["message"]


async def test_request_bodies_are_capped(api, proxy, tasks, monkeypatch):
    monkeypatch.setattr(proxy_api, "MAX_BODY_BYTES", 4096)
    r = await proxy.post(f"/proxy/{OWNED}/upload", content=b"x" * 4097)  # declared too long
    assert r.status_code == 413, r.text
    assert "limit of 4096 bytes" in r.json()["message"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 1024

    r = await proxy.post(f"/proxy/{OWNED}/upload", content=chunks())  # found too long on the way
    assert r.status_code == 413, r.text
    assert not any(s.path.endswith("/upload") for s in tasks.seen)
    r = await proxy.post(f"/proxy/{OWNED}/upload", content=b"z" * 4096)  # at the limit: fine
    assert r.status_code == 200 and tasks.seen[-1].body == b"z" * 4096
    monkeypatch.undo()
    assert "limit of 64 MiB" in proxy_api._too_large().message


async def test_idle_for_moves_with_traffic(api, proxy, tasks):
    assert api.rt.proxy.idle_for(OWNED) is None
    assert (await proxy.get(f"/proxy/{OWNED}/a")).status_code == 200
    first = api.rt.proxy.idle_for(OWNED)
    assert first is not None and first < 5
    await asyncio.sleep(0.2)
    later = api.rt.proxy.idle_for(OWNED)
    assert later is not None and later >= first + 0.15
    assert (await proxy.get(f"/proxy/{OWNED}/b")).status_code == 200
    again = api.rt.proxy.idle_for(OWNED)
    assert again is not None and again < later
    # Refused traffic is not activity.
    nora = await add_user(api, "nora")
    await asyncio.sleep(0.1)
    before = api.rt.proxy.idle_for(OWNED)
    assert (await proxy.get(f"/proxy/{OWNED}/c", headers=nora)).status_code == 403
    after = api.rt.proxy.idle_for(OWNED)
    assert before is not None and after is not None and after >= before


def test_resolvers_are_asked_in_the_order_added_and_only_once_each():
    async def first(session, task_id):
        return None

    async def second(session, task_id):
        return None

    proxy = svc.ProxySessions()  # each master its own
    proxy.add_resolver(first)
    proxy.add_resolver(second)
    proxy.add_resolver(first)
    assert proxy.resolvers() == (first, second) and svc.ProxySessions().resolvers() == ()
    proxy.remove_resolver(first)
    assert proxy.resolvers() == (second,)
    assert svc.ProxyTarget(1, "h", 1, "/proxy/t/").path_for("/api") == "/proxy/t/api"
    assert svc.ProxyTarget(1, "h", 1).path_for("/") == "/"


def test_header_rules():
    raw = [(b"Host", b"master"), (b"Connection", b"keep-alive, X-Hop"), (b"X-Hop", b"1"), (b"Upgrade", b"h2c"),
           (b"Authorization", b"Bearer secret"), (b"Cookie", f"a=1; {webui_session.COOKIE}=secret; b=2".encode()),
           (b"X-Forwarded-For", b"10.0.0.1"), (b"Accept", b"*/*")]
    out = proxy_api.forwarded_headers(raw, client="10.0.0.2", scheme="https")
    assert ("Cookie", "a=1; b=2") in out
    assert ("X-Forwarded-For", "10.0.0.1, 10.0.0.2") in out
    assert ("X-Forwarded-Proto", "https") in out and ("X-Forwarded-Host", "master") in out
    names = {k.lower() for k, _ in out}
    assert not names & {"connection", "x-hop", "upgrade", "authorization"}
    assert proxy_api.without_token_param("a=1&token=s3cret&b=%20&tok%65n=x") == "a=1&b=%20"
    assert proxy_api.sendable(1005) == 1000 and proxy_api.sendable(1006) == 1011
    assert proxy_api.sendable(4321) == 4321


# ---- WebSocket -------------------------------------------------------------------------------
@asynccontextmanager
async def served(app) -> AsyncIterator[int]:
    """The app on a real port (uvicorn, this event loop: the runtime is already started)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", ws="websockets-sansio"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and not serving.done(), "uvicorn did not start"
        await asyncio.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def closed_with(url: str, **kwargs) -> tuple[int | None, str]:
    async with ws_connect(url, open_timeout=10, **kwargs) as ws:
        try:
            await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed:
            pass
        return ws.close_code, ws.close_reason or ""


async def test_websocket_frames_go_both_ways(api, proxy, tasks):
    token = token_of(api)
    async with served(proxy.app) as port:
        base = f"ws://{SOCKET}.localhost:{port}/proxy/{SOCKET}"  # its own host (connected to 127.0.0.1)
        # A client of the API: the bearer token in a header, a subprotocol the task picks.
        async with ws_connect(f"{base}/api/kernels/k1/channels?session=s1", open_timeout=10, host="127.0.0.1",
                              additional_headers={"Authorization": f"Bearer {token}"},
                              subprotocols=[Subprotocol("v1.test")]) as ws:
            assert ws.subprotocol == "v1.test"
            await ws.send("hello")
            assert await asyncio.wait_for(ws.recv(), 10) == "hello"
            await ws.send(b"\x00\x01binary")
            assert await asyncio.wait_for(ws.recv(), 10) == b"\x00\x01binary"
        path, headers, subprotocol = tasks.ws_seen[-1]
        assert path == f"/proxy/{SOCKET}/api/kernels/k1/channels?session=s1"
        assert subprotocol == "v1.test"
        assert [v for k, v in headers if k.lower() == "authorization"] == [SECRET[1]]  # the task's secret alone

        # A client that cannot set headers: the token query parameter, which the task never sees.
        async with ws_connect(f"{base}/echo?token={token}&x=1", open_timeout=10, host="127.0.0.1") as ws:
            await ws.send("via query")
            assert await asyncio.wait_for(ws.recv(), 10) == "via query"
        assert tasks.ws_seen[-1][0] == f"/proxy/{SOCKET}/echo?x=1"

        # A browser: the task's proxy cookie, from a page of the task's own origin.
        session = api.rt.proxy.new_session(token, SOCKET, await me_of(api))
        cookie = {"Cookie": f"{proxy_api.PROXY_COOKIE}={session}; {webui_session.COOKIE}={token}; jupyter=1"}
        async with ws_connect(f"{base}/echo", open_timeout=10, origin=Origin(f"http://{SOCKET}.localhost:{port}"),
                              additional_headers=cookie, host="127.0.0.1") as ws:
            await ws.send("via cookie")
            assert await asyncio.wait_for(ws.recv(), 10) == "via cookie"
            # The task closing ends the client's socket with the task's code.
            await ws.send("close-please")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 4321
        cookies = [v for k, v in tasks.ws_seen[-1][1] if k.lower() == "cookie"]
        assert cookies == ["jupyter=1"]
        for _, headers, _ in tasks.ws_seen:
            assert token not in " ".join(v for _, v in headers) and session not in " ".join(v for _, v in headers)
        idle = api.rt.proxy.idle_for(SOCKET)
        assert idle is not None and idle < 30


async def test_the_answer_streams(api, proxy, tasks):
    """Through a real server, the client reads the task's first chunk before the task has sent
    the rest."""
    async with served(proxy.app) as port, httpx.AsyncClient(timeout=10) as client:
        url = f"http://127.0.0.1:{port}/proxy/{OWNED}/slow"
        async with client.stream("GET", url, headers={"Authorization": api.headers["Authorization"],
                                                      "Host": f"{OWNED}.localhost:{port}"}) as r:
            assert r.status_code == 200
            chunks = r.aiter_raw()
            assert await asyncio.wait_for(anext(chunks), 5) == b"first"
            tasks.http.release.set()
            assert b"".join([c async for c in chunks]) == b"last"


async def test_websocket_refusals(api, proxy, tasks):
    token = token_of(api)
    nora = (await add_user(api, "nora"))["Authorization"]
    async with served(proxy.app) as port:

        async def refused(task_id: str, rest: str, host: str | None = None, **kwargs) -> tuple[int | None, str]:
            """A socket to ``task_id``'s path on ``host`` (by default its own), connected to 127.0.0.1."""
            url = f"ws://{host or task_id}.localhost:{port}/proxy/{task_id}/{rest}"
            return await closed_with(url, host="127.0.0.1", **kwargs)

        code, reason = await refused(SOCKET, "echo")
        assert code == 4401, reason
        code, reason = await refused(SOCKET, "echo", additional_headers={"Authorization": nora})
        assert code == 4403 and f"task {SOCKET}" in reason, reason
        code, reason = await refused("nope", f"echo?token={token}")
        assert code == 4404 and "task nope" in reason, reason
        code, reason = await refused(DOWN, f"echo?token={token}")
        assert code == 4502 and f"task {DOWN}" in reason, reason
        # The master's session cookie is no credential here, even from the task's own origin.
        code, reason = await refused(SOCKET, "echo", origin=Origin(f"http://{SOCKET}.localhost:{port}"),
                                     additional_headers={"Cookie": f"{webui_session.COOKIE}={token}"})
        assert code == 4401, reason
        # The proxy cookie from another site's page (or with no Origin at all) is not enough.
        cookie = {"Cookie": f"{proxy_api.PROXY_COOKIE}={api.rt.proxy.new_session(token, SOCKET, await me_of(api))}"}
        code, reason = await refused(SOCKET, "echo", additional_headers=cookie, origin=Origin("http://evil.example"))
        assert code == 4403 and "Origin" in reason, reason
        code, reason = await refused(SOCKET, "echo", additional_headers=cookie)
        assert code == 4403, reason
        # Another task's host (its page's origin) is refused before anything else, even with a token.
        code, reason = await refused(SOCKET, f"echo?token={token}", host=OWNED,
                                     origin=Origin(f"http://{OWNED}.localhost:{port}"))
        assert code == 4421 and "host of its own" in reason, reason
    assert not tasks.ws_seen, "a refused socket reached the task"


def test_proxy_port_in_master_yaml_is_checked_naming_the_field(tmp_path):
    from controlplane.config.errors import ConfigError
    from controlplane.master.settings import load_settings

    config = tmp_path / "master.yaml"
    for value, message in (("'8081'", "integer in 0..65535"), ("70000", "integer in 0..65535"),
                           ("8080", "must differ from port")):
        config.write_text(f"port: 8080\nproxy_port: {value}\n")
        with pytest.raises(ConfigError, match="proxy_port") as e:
            load_settings(config)
        assert message in str(e.value)
    config.write_text("port: 8080\nproxy_port: 8081\nproxy_url: https://notebooks.example.com\n")
    settings = load_settings(config)
    assert (settings.proxy_port, settings.proxy_url) == (8081, "https://notebooks.example.com")
    config.write_text("port: 8080\n")
    assert load_settings(config).proxy_port == 0  # a free port, picked at start
