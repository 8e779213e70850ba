"""Red team: a notebook's page, opened by an admin in chromium, against another user's notebook
and the admin's own session on the master.

The attack (the issue's): alice's notebook serves her own page where JupyterLab should be. The
admin opens it from the master. Her page, running with the admin's browser, tries to
(i) ``fetch`` the master's link to bob's notebook (``mode: "no-cors"``, credentials) so the
master mints a ticket and the proxy sets a cookie for bob's notebook, then read bob's
``files/secret.txt`` same-origin and from bob's host; (ii) get there through an iframe, a
``window.open`` and a form instead, and read what loads; (iii) open a WebSocket to bob's
"terminal" and run ``id > pwned-by-alice.txt``; (iv) toss ``det_session``/``det_csrf``/
``det_proxy`` cookies for ``/api``, ``/experiments``, ``/login`` (with and without a ``Domain``)
to lock the admin out, and, in a second step, her own valid token to have the admin act as her.
Her notebook's answers also carry ``Set-Cookie`` headers naming the master's cookies or with a
``Domain``. Each must fail: bob's notebook sees no request at all and runs no command, the secret
is never read, no cookie from her answers is stored, and the admin's pages and ``GET /api/v1/me``
keep working as the admin (after the valid-token toss: never as alice; signing in again works).

The master runs in this process (``Listeners``, as ``det-master`` runs it); the master is reached
as ``det.localhost`` (chromium resolves ``*.localhost`` to loopback), so tasks' hosts
(``<task>.det.localhost``) are same-site with it, as ``det.example.com`` and
``*.tasks.example.com`` are in production: its SameSite=Strict cookie goes along with her page's
requests, and only the master's own checks stop her. The notebooks are local HTTP + WebSocket
servers that a proxy resolver names as tasks of alice's and bob's.

Also: alice making 10,000 proxy sessions does not end bob's.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import pytest
import requests
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from controlplane.master import proxy_sessions
from controlplane.master.serving import Listeners
from controlplane.master.settings import MasterSettings
from tests.support.cluster import login
from tests.support.deadline import bounded

pytestmark = pytest.mark.e2e

ALICE_NB, BOB_NB = "nb-alice", "nb-bob"
SECRET = "bobs-secret-4f1c"
PLANTED = "planted-by-answer"
MASTER_HOST = "det.localhost"

ATTACK = """<!doctype html><html><head><title>working</title></head><body><p>alice's notebook</p><script>
const MASTER = %(master)s, BOB = %(bob)s, BOB_ORIGIN = %(bob_origin)s, DOMAIN = %(domain)s;
const out = {};
const note = (k, v) => { out[k] = String(v).slice(0, 300); };
const wait = (ms) => new Promise(r => setTimeout(r, ms));
const secretUrls = () => [["same_origin", "/proxy/" + BOB + "/files/secret.txt"],
                          ["bob_origin", BOB_ORIGIN + "/proxy/" + BOB + "/files/secret.txt"]];
async function read(prefix) {
  for (const [k, url] of secretUrls()) {
    try { const r = await fetch(url, {credentials: "include"}); note(prefix + k, r.status + " " + await r.text()); }
    catch (e) { note(prefix + k, "blocked " + e.name); }
  }
}
async function loaded(frame) { await new Promise(r => { frame.onload = r; setTimeout(r, 3000); }); }
function body(win) { try { return win.document.body ? win.document.body.innerText : ""; } catch (e) { return null; } }
(async () => {
  const link = MASTER + "/proxy/" + BOB + "/files/secret.txt";
  // (i) the master's link with the admin's cookie, then bob's file
  try { await fetch(link, {mode: "no-cors", credentials: "include"}); note("i_link", "sent"); }
  catch (e) { note("i_link", "blocked " + e.name); }
  await read("i_");
  // (ii) an iframe, a window and a form navigation to the same link
  const frame = document.createElement("iframe");
  frame.src = link; document.body.appendChild(frame); await loaded(frame);
  note("ii_iframe", body(frame.contentWindow) ?? "cross-origin");
  const w = window.open(link, "_blank");
  let seen = "no window";
  for (let n = 0; w && n < 60; n++) {
    const text = body(w);
    if (text === null) { seen = "cross-origin"; break; }
    if (text) { seen = text; break; }
    await wait(50);
  }
  note("ii_window", seen);
  if (w) w.close();
  const target = document.createElement("iframe"); target.name = "formtarget"; document.body.appendChild(target);
  const form = document.createElement("form");
  form.method = "GET"; form.action = MASTER + "/proxy/" + BOB + "/files/secret.txt"; form.target = "formtarget";
  document.body.appendChild(form); form.submit(); await loaded(target);
  note("ii_form", body(target.contentWindow) ?? "cross-origin");
  await read("ii_after_");
  // (iii) bob's terminal over a WebSocket, on this host and on bob's
  const terminal = "/proxy/" + BOB + "/terminals/websocket/1";
  for (const [k, url] of [["iii_same_host", "ws://" + location.host + terminal],
                          ["iii_bob_host", BOB_ORIGIN.replace("http", "ws") + terminal]]) {
    note(k, await new Promise(done => {
      const ws = new WebSocket(url);
      let opened = "";
      ws.onopen = () => { opened = "opened, "; ws.send(JSON.stringify(["stdin", "id > pwned-by-alice.txt\\r"])); };
      ws.onclose = (e) => done(opened + "closed " + e.code + " " + e.reason);
      setTimeout(() => done(opened + "still open"), 3000);
    }));
  }
  // (iv) cookie tossing: the master's cookie names for its paths, for ten years
  for (const name of ["det_session", "det_csrf", "det_proxy"]) {
    for (const path of ["/api", "/experiments", "/login", "/", "/proxy/" + BOB + "/"]) {
      document.cookie = name + "=tossed-by-alice; path=" + path + "; max-age=315360000";
      document.cookie = name + "=tossed-by-alice; path=" + path + "; domain=" + DOMAIN + "; max-age=315360000";
    }
  }
  window.outcome = out;
  document.title = "done";
})();
</script></body></html>"""


@dataclass
class Notebook:
    """A fake notebook: its page (``page``) for any plain HTTP request, a "terminal" for any
    WebSocket; what it was asked."""

    page: str = ""
    set_cookies: list[str] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    port: int = 0

    def answer(self, connection: ServerConnection, request: Request) -> Response | None:
        self.requests.append((request.path, dict(request.headers.raw_items())))
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None  # the terminal
        response = connection.respond(HTTPStatus.OK, self.page)
        del response.headers["Content-Type"]  # websockets' Headers add a value on assignment
        response.headers["Content-Type"] = "text/html; charset=utf-8"
        for cookie in self.set_cookies:
            response.headers["Set-Cookie"] = cookie
        return response

    async def terminal(self, connection: ServerConnection) -> None:
        try:
            async for message in connection:
                self.commands.append(str(message))
        except ConnectionClosed:
            pass


@pytest.fixture(scope="module")
def notebooks() -> Iterator[dict[str, Notebook]]:
    """alice's and bob's notebooks, served from one event loop in a thread of their own."""
    books = {ALICE_NB: Notebook(), BOB_NB: Notebook(page=SECRET)}
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Future[None] | None = None

    async def main() -> None:
        nonlocal stop
        stop = loop.create_future()
        servers = [await serve(nb.terminal, "127.0.0.1", 0, process_request=nb.answer) for nb in books.values()]
        for nb, server in zip(books.values(), servers, strict=True):
            nb.port = next(iter(server.sockets)).getsockname()[1]
        ready.set()
        await stop
        for server in servers:
            server.close()
            await server.wait_closed()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(bounded(30)), "the notebooks did not start"
    try:
        yield books
    finally:
        loop.call_soon_threadsafe(lambda: stop is not None and stop.set_result(None))
        thread.join(bounded(30))


@dataclass
class Cluster:
    listeners: Listeners
    url: str  # the master as the browser reaches it: http://det.localhost:<port>
    admin: str
    alice: tuple[int, str]  # (id, token)
    bob: tuple[int, str]

    @property
    def proxy(self) -> proxy_sessions.ProxySessions:
        return self.listeners.app.state.runtime.proxy


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, notebooks) -> Iterator[Cluster]:
    """One master for the module (API and proxy listeners in a thread), alice and bob, and their
    notebooks as tasks of theirs."""
    listeners = Listeners(MasterSettings(data_dir=tmp_path_factory.mktemp("master"), port=0))
    thread = threading.Thread(target=asyncio.run, args=(listeners.serve(),), daemon=True)
    thread.start()
    try:
        listeners.wait_started(bounded(60))
        admin = login(listeners.url, "admin")
        users = {}
        for name in ("alice", "bob"):
            r = requests.post(f"{listeners.url}/api/v1/users", headers={"Authorization": f"Bearer {admin}"},
                              timeout=10, json={"user": {"username": name, "role": "user"}, "password": "pw",
                                                "isHashed": False})
            assert r.status_code == 200, r.text
            users[name] = (r.json()["user"]["id"], login(listeners.url, name, "pw"))
        owners = {ALICE_NB: users["alice"][0], BOB_NB: users["bob"][0]}

        async def resolver(session: Any, task_id: str) -> proxy_sessions.ProxyTarget | None:
            if task_id not in owners:
                return None
            return proxy_sessions.ProxyTarget(owners[task_id], "127.0.0.1", notebooks[task_id].port,
                                              f"/proxy/{task_id}")

        listeners.app.state.runtime.proxy.add_resolver(resolver)
        yield Cluster(listeners, f"http://{MASTER_HOST}:{listeners.port}", admin, users["alice"], users["bob"])
    finally:
        listeners.stop()
        thread.join(bounded(30))


def sign_in(page: Any, url: str) -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/experiments.*"))


def me(page: Any) -> tuple[int, str]:
    """``GET /api/v1/me`` from a page of the master: (status, username or message)."""
    got = page.evaluate("""async () => { const r = await fetch("/api/v1/me");
                                         const b = await r.json(); return [r.status, JSON.stringify(b)]; }""")
    body = json.loads(got[1])
    return got[0], (body.get("user") or {}).get("username") or body.get("message", "")


def test_a_notebook_page_opened_by_an_admin_cannot_reach_another_notebook_or_the_admins_session(
        cluster, notebooks, chromium):
    proxy_port = cluster.listeners.proxy_port
    bob_origin = f"http://{BOB_NB}.{MASTER_HOST}:{proxy_port}"
    alice = notebooks[ALICE_NB]
    alice.page = ATTACK % {"master": json.dumps(cluster.url), "bob": json.dumps(BOB_NB),
                           "bob_origin": json.dumps(bob_origin), "domain": json.dumps(MASTER_HOST)}
    alice.set_cookies = [f"det_session={PLANTED}; Path=/api; Domain={MASTER_HOST}", f"det_csrf={PLANTED}; Path=/",
                         f"det_proxy={PLANTED}; Path=/proxy/{BOB_NB}/; Domain={MASTER_HOST}",
                         f"wide={PLANTED}; Domain={MASTER_HOST}; Path=/",
                         f"__Host-det_session={PLANTED}; Secure; Path=/"]
    context = chromium.new_context()
    context.set_default_timeout(bounded(30) * 1000)
    try:
        admin = context.new_page()
        sign_in(admin, cluster.url)
        # The admin has bob's notebook open too (a proxy cookie on bob's host, same-site with hers).
        bobs = context.new_page()
        bobs.goto(f"{cluster.url}/proxy/{BOB_NB}/files/secret.txt")  # typed, or a link on the master's pages
        assert SECRET in bobs.content(), bobs.url
        notebooks[BOB_NB].requests.clear()
        page = context.new_page()
        page.goto(f"{cluster.url}/proxy/{ALICE_NB}/")  # what the web UI and `det notebook open` link to
        page.wait_for_function("document.title === 'done'")
        outcome = page.evaluate("window.outcome")
        assert not any(SECRET in value for value in outcome.values()), outcome
        assert not notebooks[BOB_NB].requests, ("bob's notebook was reached", notebooks[BOB_NB].requests, outcome)
        assert SECRET in bobs.content()  # the admin's own tab of bob's notebook is untouched
        assert not notebooks[BOB_NB].commands, ("a command ran in bob's notebook", outcome)
        # The proxy refuses a socket by accepting and closing it at once with 4000 + the HTTP status.
        assert re.search(r"closed 44\d\d", outcome["iii_same_host"]), outcome
        assert re.search(r"closed 44\d\d", outcome["iii_bob_host"]), outcome
        stored = context.cookies()
        assert not [c for c in stored if c["value"] == PLANTED], stored  # her answers' cookies were dropped
        # Each notebook loaded on its own host.
        assert page.url.startswith(f"http://{ALICE_NB}.{MASTER_HOST}:{proxy_port}/proxy/{ALICE_NB}/"), page.url
        assert bobs.url.startswith(f"{bob_origin}/proxy/{BOB_NB}/"), bobs.url
        # No proxy session for bob's notebook but the one the admin opened it with, on bob's host.
        bob_sessions = [c for c in stored if c["name"] == "det_proxy" and c["value"] != "tossed-by-alice"
                        and f"/proxy/{BOB_NB}/" == c["path"]]
        assert [c["domain"] for c in bob_sessions] == [f"{BOB_NB}.{MASTER_HOST}"], stored

        # The admin's pages and API still work, as the admin, with her cookies in the jar.
        admin.goto(f"{cluster.url}/experiments")
        assert admin.url.startswith(f"{cluster.url}/experiments"), admin.url
        assert me(admin) == (200, "admin")

        # Her own valid token tossed in for the API's paths: the admin is never signed in as alice;
        # signing in again ends it and works.
        page.evaluate("""([token, domain]) => { for (const path of ["/api", "/experiments", "/login", "/"])
            document.cookie = "det_session=" + token + "; path=" + path + "; domain=" + domain + "; max-age=315360000";
        }""", [cluster.alice[1], MASTER_HOST])
        status, who = me(admin)
        assert who != "alice" and (status, who) != (200, "alice"), (status, who)
        sign_in(admin, cluster.url)
        assert me(admin) == (200, "admin")
        assert requests.get(f"{cluster.listeners.url}/api/v1/me", timeout=10,
                            headers={"Authorization": f"Bearer {cluster.alice[1]}"}).status_code == 401
    finally:
        context.close()


def test_one_users_proxy_sessions_never_end_anothers(cluster, notebooks):
    """Alice opens her notebook 10,000 times (each a proxy session of hers); bob's one session
    for his notebook goes on working."""
    bob_id, bob_token = cluster.bob
    proxy_port = cluster.listeners.proxy_port
    link = requests.get(f"{cluster.listeners.url}/proxy/{BOB_NB}/files/secret.txt", allow_redirects=False,
                        headers={"Authorization": f"Bearer {bob_token}"}, timeout=10)
    assert link.status_code == 303, link.text
    ticket = link.headers["location"].partition("?")[2]
    bob_host = {"Host": f"{BOB_NB}.{MASTER_HOST}:{proxy_port}"}  # Python cannot resolve *.localhost here
    redeemed = requests.get(f"http://127.0.0.1:{proxy_port}/proxy/{BOB_NB}/files/secret.txt?{ticket}",
                            headers=bob_host, allow_redirects=False, timeout=10)
    assert redeemed.status_code == 303, redeemed.text
    cookie = {"Cookie": redeemed.headers["set-cookie"].split(";")[0], **bob_host}

    def bobs_file() -> requests.Response:
        return requests.get(f"http://127.0.0.1:{proxy_port}/proxy/{BOB_NB}/files/secret.txt", headers=cookie,
                            allow_redirects=False, timeout=10)

    assert bobs_file().text == SECRET
    alice_id, alice_token = cluster.alice
    for _ in range(10_000):  # what her redeemed tickets do, without 20,000 requests
        cluster.proxy.new_session(alice_token, ALICE_NB, alice_id)
    got = bobs_file()
    assert got.status_code == 200 and got.text == SECRET, (got.status_code, got.text[:200])
