"""A notebook's own page, opened by an admin in chromium through the master's task proxy, cannot
act as the admin on the master: it is served from the task's own origin (``<task>.localhost`` on
the proxy's port), so it can neither read a master page's CSRF token nor send the admin's session
with an API call.

The "notebook" is a local HTTP server that a proxy resolver registered by this test names as a
task of alice's; the master runs in this process (in a thread of its own), so the resolver is
its own. The master serves ``/proxy/...`` only as a link to its proxy's own listener. The page
tries what the issue's notebook did: fetch a master page, read its CSRF token,
``PATCH /api/v1/users/<alice> {"role": "admin"}``, both relative to itself and at the master's
own origin, and writes what happened into its title. (``tests/security/test_task_origins.py``
has the same-site case: the master reached by a DNS name, the task on a subdomain of it.)
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from controlplane.master import proxy_sessions as task_proxy
from controlplane.master.serving import Listeners
from controlplane.master.settings import MasterSettings
from tests.support.cluster import login
from tests.support.deadline import bounded

# SQLite (the default): the browser's origins are under test, not SQL.
pytestmark = pytest.mark.e2e

TASK = "nb-alice-page"

PAGE = """<!doctype html><html><head><title>working</title></head><body><p>alice's notebook</p><script>
(async () => {
  const results = [];
  for (const base of ["", MASTER]) {
    try {
      const page = await (await fetch(base + "/experiments", {credentials: "include"})).text();
      const meta = new DOMParser().parseFromString(page, "text/html").querySelector('meta[name="csrf-token"]');
      const csrf = meta ? meta.content : "";
      const r = await fetch(base + "/api/v1/users/" + ALICE, {
        method: "PATCH", credentials: "include",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify({role: "admin"})});
      results.push((base || "same origin") + ": " + r.status);
    } catch (e) {
      results.push((base || "same origin") + ": blocked (" + e.name + ")");
    }
  }
  document.title = "done " + results.join("; ");
})();
</script></body></html>"""


class NotebookPage(BaseHTTPRequestHandler):
    server: PageServer

    def do_GET(self) -> None:  # http.server's name
        body = self.server.page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class PageServer(ThreadingHTTPServer):
    daemon_threads = True
    page = ""


@pytest.fixture
def notebook_page() -> Iterator[PageServer]:
    server = PageServer(("127.0.0.1", 0), NotebookPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def master(tmp_path) -> Iterator[Listeners]:
    """A master (API and proxy listeners) in a thread of this process, with its own event loop."""
    listeners = Listeners(MasterSettings(data_dir=tmp_path / "master"))
    thread = threading.Thread(target=asyncio.run, args=(listeners.serve(),), daemon=True)
    thread.start()
    try:
        listeners.wait_started(bounded(60))
        yield listeners
    finally:
        listeners.stop()
        thread.join(bounded(30))


def test_a_notebooks_page_opened_by_an_admin_cannot_make_its_owner_admin(chromium, master, notebook_page):
    url = master.url
    admin = {"Authorization": f"Bearer {login(url, 'admin')}"}
    r = requests.post(f"{url}/api/v1/users", headers=admin, timeout=10,
                      json={"user": {"username": "alice", "role": "user"}, "password": "pw", "isHashed": False})
    assert r.status_code == 200, r.text
    alice = r.json()["user"]["id"]
    notebook_page.page = PAGE.replace("MASTER", repr(url)).replace("ALICE", str(alice))

    async def resolver(session, task_id: str) -> task_proxy.ProxyTarget | None:
        if task_id != TASK:
            return None
        return task_proxy.ProxyTarget(alice, "127.0.0.1", notebook_page.server_address[1], "")

    master.app.state.runtime.proxy.add_resolver(resolver)
    context = chromium.new_context(base_url=url)
    context.set_default_timeout(bounded(30) * 1000)
    try:
        page = context.new_page()
        page.goto("/login")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", "")
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r".*/experiments.*"))
        page.goto(f"/proxy/{TASK}/")  # what the web UI and `det notebook open` link to
        page.wait_for_function("document.title.startsWith('done')")
        outcome = page.title()
        # The notebook's page did load, through the proxy, on the task's own origin.
        assert "alice's notebook" in page.content()
        # 127.0.0.1 gives the task a host of its own under localhost (browsers resolve it to loopback).
        assert page.url == f"http://{TASK}.localhost:{master.proxy_port}/proxy/{TASK}/", page.url
    finally:
        context.close()
        master.app.state.runtime.proxy.remove_resolver(resolver)
    me = requests.get(f"{url}/api/v1/users/{alice}", headers=admin, timeout=10).json()["user"]
    assert not me["admin"] and me.get("role") != "admin", (me, outcome)
