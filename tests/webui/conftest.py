"""Browser tests of the web UI: Debian's chromium driven by Playwright (Python), against real
master (and agent) processes on loopback.

- ``chromium``: one headless browser per module (Playwright's sync API runs an event loop while it
  is open, which must not outlive the browser tests) (``/usr/bin/chromium``; Playwright's own
  download cannot work here). A test whose machine lacks it fails, naming what to install.
- ``ui``: ``ui(master, username)`` opens a signed-in page (keyword arguments go to Playwright's
  ``new_context``: ``viewport=...``, ``is_mobile=True`` for a phone). Every request the page makes is
  recorded; at teardown the test fails if any went to a host other than the master (the UI must
  work with no internet), and a screenshot of each page is saved as
  ``test-results/webui/<test>/<n>-<user>.png``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test-results" / "webui"


def chromium_path() -> str:
    path = os.environ.get("DET_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("chromium is not installed (scripts/setup.sh installs Debian's chromium as root)")
    return path


@pytest.fixture(scope="module")
def chromium() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()


def output_dir(request: pytest.FixtureRequest) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:120]
    out = RESULTS / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


class UiSession:
    """A signed-in browser context and its page, with the log of every request it made."""

    def __init__(self, browser, base_url: str, username: str, password: str, **context) -> None:
        self.base_url, self.username = base_url, username
        self.context = browser.new_context(base_url=base_url, **{"viewport": {"width": 1400, "height": 900}, **context})
        self.context.set_default_timeout(30_000)
        self.requests: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page = self.context.new_page()
        self.page.goto("/login")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(re.compile(r".*/experiments.*"))

    def foreign_requests(self) -> list[str]:
        own = urlsplit(self.base_url).netloc
        return [u for u in self.requests if urlsplit(u).scheme in ("http", "https", "ws", "wss")
                and urlsplit(u).netloc != own]

    def cookie(self, name: str) -> str | None:
        return next((c["value"] for c in self.context.cookies() if c["name"] == name), None)

    def csrf(self) -> str:
        return self.page.get_attribute('meta[name="csrf-token"]', "content") or ""


@pytest.fixture
def ui(chromium, request) -> Iterator:
    """``ui(base_url, username="determined", password="", **new_context_options)`` -> a signed-in ``UiSession``."""
    sessions: list[UiSession] = []

    def open_session(base_url: str, username: str = "determined", password: str = "", **context) -> UiSession:
        s = UiSession(chromium, base_url, username, password, **context)
        sessions.append(s)
        return s

    yield open_session
    out = output_dir(request)
    foreign = []
    for n, s in enumerate(sessions):
        try:
            s.page.screenshot(path=str(out / f"{n}-{s.username}.png"), full_page=True)
        finally:
            foreign += s.foreign_requests()
            s.context.close()
    assert not foreign, f"the UI asked hosts other than the master: {foreign[:10]}"
