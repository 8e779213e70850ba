"""The Job Queue page in a browser against a real master and agent: Manage Job moves a queued
job ahead of another through the API `det job update --ahead-of` uses, the page's order then
matches `det job list`, and a refused update shows the API's own message."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import det
from tests.support.cluster import AgentProcess, MasterProcess, login, wait_for

# SQLite (the default): the pages and the processes behind them are under test, not SQL.
pytestmark = pytest.mark.e2e

SLEEPER = "import time\ntime.sleep(3600)\n"  # holds its slot until the test stops the cluster


@pytest.fixture
def cluster(tmp_path, db_url):
    master = MasterProcess(tmp_path / "master", db_url).start()
    agent = AgentProcess(master, "agent-1", 1, tmp_path / "agent").start()
    try:
        yield master
    finally:
        agent.stop()
        master.stop()


def _submit(master: MasterProcess, tmp_path, name: str, priority: int) -> int:
    context = tmp_path / "ctx"
    context.mkdir(exist_ok=True)
    (context / "sleep.py").write_text(SLEEPER)
    config = tmp_path / f"{name}.yaml"
    config.write_text(f"name: {name}\nentrypoint: python3 sleep.py\nresources:\n  priority: {priority}\n"
                      "searcher:\n  name: single\n  metric: x\n  max_length: 1\n")
    out = det("experiment", "create", str(config), str(context), "--json", env=_env(master, tmp_path))
    return json.loads(out.stdout)["id"]


def _env(master: MasterProcess, tmp_path) -> dict:
    return {"DET_MASTER": master.url, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def _cli_order(master: MasterProcess, tmp_path) -> list[str]:
    return [j["jobId"] for j in json.loads(det("job", "list", "--json", env=_env(master, tmp_path)).stdout)]


def _page_order(page) -> list[str]:
    return page.eval_on_selector_all("#job-queue tr[data-job-id]", "rows => rows.map(r => r.dataset.jobId)")


def _manage(page, job_id: str) -> None:
    page.click(f'#job-queue tr[data-job-id="{job_id}"] details.menu summary')
    page.click(f'#job-queue tr[data-job-id="{job_id}"] button[data-manage-job]')
    page.wait_for_selector("#manage-job[open]")


def test_manage_job_moves_a_queued_job_ahead_and_the_order_matches_det_job_list(ui, cluster, tmp_path):
    import requests

    headers = {"Authorization": f"Bearer {login(cluster.url)}"}
    wait_for(lambda: requests.get(f"{cluster.url}/api/v1/agents", headers=headers, timeout=10).json()["agents"],
             120, "the agent to register")
    running = _submit(cluster, tmp_path, "running", 1)  # a higher priority: nothing below preempts it

    def scheduled() -> bool:
        jobs = requests.get(f"{cluster.url}/api/v1/job-queues-v2", headers=headers, timeout=10).json()["jobs"]
        return any(j["full"]["entityId"] == str(running) and j["full"]["allocatedSlots"] == 1 for j in jobs)

    wait_for(scheduled, 180, "the first experiment to hold the agent's slot")
    _submit(cluster, tmp_path, "first-queued", 42)
    _submit(cluster, tmp_path, "second-queued", 42)

    s = ui(cluster.url)
    page = s.page
    page.goto("/jobs")
    wait_for(lambda: len(_page_order(page)) == 3, 60, "three jobs on the page")
    before = _page_order(page)
    assert before == _cli_order(cluster, tmp_path)
    names = page.eval_on_selector_all("#job-queue tr[data-job-id] td:nth-child(4)",
                                      "cells => cells.map(c => c.textContent.trim())")
    assert names == ["running", "first-queued", "second-queued"], names
    first, second = before[1], before[2]
    page.evaluate("window.__not_reloaded = true")

    _manage(page, second)
    page.select_option("#manage-job select[name=relation]", "aheadOf")
    page.fill("#manage-job input[name=target]", first)
    page.click('#manage-job button[value="position"]')
    page.wait_for_selector("#flash.ok", state="attached")
    assert page.locator("#flash").inner_text() == f"Updated job {second}: ahead of {first}"
    wait_for(lambda: _page_order(page) == [before[0], second, first], 60, "the page to show the new order")
    assert _page_order(page) == _cli_order(cluster, tmp_path)
    assert page.evaluate("window.__not_reloaded") is True  # the table changed in place

    # A refused update: the API's message, in #flash, and nothing changed.
    _manage(page, first)
    page.fill("#manage-job input[name=priority]", "0")
    page.click('#manage-job button[value="priority"]')
    wait_for(lambda: "priority must be an integer from 1 to 99" in page.locator("#flash").inner_text(), 60,
             "the API's refusal in #flash")
    assert "ok" not in (page.get_attribute("#flash", "class") or "")
    assert _page_order(page) == _cli_order(cluster, tmp_path) == [before[0], second, first]
