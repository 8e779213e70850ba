"""The OpenPAI portal in Debian's chromium against a real master and agent: a pasted job with
mistakes shows every one of them at once (the API's message), a good one is submitted and listed,
its page shows its task running and its logs following live, Stop stops it, Clone submits it again
under a new name, and the queue's GENERIC row links to it."""

from __future__ import annotations

import json

import pytest
import requests

from tests.support.cluster import AgentProcess, MasterProcess, login, wait_for

# SQLite (the default): the pages and the processes behind them are under test, not SQL.
pytestmark = pytest.mark.e2e

TIMEOUT = 120.0  # generous: the machine may be running other suites
BAD = {"jobName": "bad name", "image": "default", "taskRoles": [
    {"name": "main", "taskNumber": 0, "cpuNumber": 1, "memoryMB": 50, "gpuNumber": 0, "command": "true"}]}
TICKER = {"jobName": "ticker", "image": "default", "taskRoles": [
    {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0,
     "command": "for i in $(seq 1 100000); do echo tick $i; sleep 0.2; done"}]}


@pytest.fixture
def cluster(tmp_path, db_url):
    master = MasterProcess(tmp_path / "master", db_url).start()
    agent = AgentProcess(master, "agent-1", 1, tmp_path / "agent").start()
    try:
        headers = {"Authorization": f"Bearer {login(master.url)}"}
        wait_for(lambda: requests.get(f"{master.url}/api/v1/agents", headers=headers, timeout=10).json()["agents"],
                 TIMEOUT, "the agent to register")
        yield master
    finally:
        agent.stop()
        master.stop()


def _paste(page, job: dict) -> None:
    page.fill("#pai-job-json", json.dumps(job, indent=2))
    page.click("#pai-submit button[type=submit]")


def test_submit_follow_stop_and_clone_a_job(ui, cluster):
    s = ui(cluster.url)
    page = s.page
    page.on("dialog", lambda d: d.accept())  # Stop asks first
    page.click('header nav a[href="/pai"]')
    page.click("text=Submit job")
    page.wait_for_url("**/pai/submit")

    _paste(page, BAD)
    page.wait_for_selector("#submit-errors li")
    errors = page.eval_on_selector_all("#submit-errors li", "items => items.map(i => i.textContent)")
    assert [e.split(":")[0] for e in errors] == ["jobName", "taskRoles[0].taskNumber", "taskRoles[0].memoryMB"], errors
    assert "no less than 100" in errors[2]

    _paste(page, TICKER)
    page.wait_for_url("**/pai/jobs/determined/ticker")
    page.goto("/pai")
    page.click('tr[data-pai-job="ticker"] a')
    page.wait_for_url("**/pai/jobs/determined/ticker")
    page.wait_for_selector('tr[data-task="main-0"][data-state="RUNNING"]', timeout=TIMEOUT * 1000)
    assert page.inner_text('tr[data-task="main-0"] code.ssh-hint') == "det pai ssh ticker main-0"
    page.wait_for_function("() => /\\[main-0\\] tick 5\\n/.test(document.getElementById('log-lines').textContent)",
                           timeout=TIMEOUT * 1000)  # lines that came after the page opened: the poller's

    page.click("#live .pai-actions button[data-api]")
    page.wait_for_selector('[data-pai-state]:text("STOPPED")', timeout=TIMEOUT * 1000)
    page.wait_for_selector('tr[data-task="main-0"][data-state="STOPPED"]', timeout=TIMEOUT * 1000)
    assert page.locator("#live .pai-actions").count() == 0

    page.click("a[data-clone]")
    page.wait_for_url("**/pai/submit?user=determined&job=ticker")
    assert json.loads(page.input_value("#pai-job-json"))["jobName"] == "ticker-2"
    page.click("#pai-submit button[type=submit]")
    page.wait_for_url("**/pai/jobs/determined/ticker-2")

    page.goto("/jobs")
    page.click('#job-queue a[href="/pai/jobs/determined/ticker-2"]')
    page.wait_for_url("**/pai/jobs/determined/ticker-2")
    page.wait_for_selector("[data-pai-state]")
    page.goto("/pai?state=STOPPED")
    assert page.eval_on_selector_all("tr[data-pai-job]", "rows => rows.map(r => r.dataset.paiJob)") == ["ticker"]
