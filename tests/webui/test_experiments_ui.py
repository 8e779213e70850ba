"""The experiment pages in Debian's chromium against a real master and agent: the list, the
learning curves against the API's metrics, logs that follow a running trial, Pause, and a viewer
who sees no buttons and whose forged requests the API refuses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.cluster import AgentProcess, MasterProcess, login, wait_for

# SQLite (the default): the pages and the processes behind them are under test, not SQL.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SPIRALS = ROOT / "examples" / "spirals"
BIN = Path(sys.executable).parent
TIMEOUT = 240.0  # generous: the machine may be running other suites
# A trial that logs a line every 0.2 s and never reports: what log following and Pause need.
TICKER = "import time\nfor i in range(100_000):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n"
TICKER_CONFIG = {"name": "ticker", "entrypoint": "python3 train.py", "max_restarts": 0,
                 "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}}}


@pytest.fixture
def cluster(tmp_path, db_url):
    """A master (a short preemption timeout: the ticker ignores preemption) and one 1-slot agent."""
    master = MasterProcess(tmp_path / "master", db_url, extra={"preemption_timeout": "5s"}).start()
    agent = AgentProcess(master, "agent-1", 1, tmp_path / "agent").start()
    try:
        wait_for(lambda: _agents(master.url), TIMEOUT, "the agent to register")
        yield master
    finally:
        agent.stop()
        master.stop()


def _headers(url: str, user: str = "determined", password: str = "") -> dict:
    return {"Authorization": f"Bearer {login(url, user, password)}"}


def _agents(url: str) -> list:
    return requests.get(f"{url}/api/v1/agents", headers=_headers(url), timeout=10).json()["agents"]


def _busy_slots(url: str) -> int:
    return sum(1 for a in _agents(url) for s in a["slots"].values() if s.get("container"))


def _det(url: str, tmp: Path, *args: str) -> str:
    env = {**os.environ, "DET_MASTER": url, "XDG_CONFIG_HOME": str(tmp / "xdg")}
    proc = subprocess.run([str(BIN / "det"), *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _create(url: str, tmp: Path, config: dict, context: Path) -> int:
    (tmp / "exp.yaml").write_text(yaml.safe_dump(config))
    return json.loads(_det(url, tmp, "experiment", "create", str(tmp / "exp.yaml"), str(context), "--json"))["id"]


def _ticker(url: str, tmp: Path) -> int:
    context = tmp / "ticker"
    context.mkdir(exist_ok=True)
    (context / "train.py").write_text(TICKER)
    return _create(url, tmp, TICKER_CONFIG, context)


def _get(url: str, path: str) -> dict:
    r = requests.get(f"{url}{path}", headers=_headers(url), timeout=30)
    r.raise_for_status()
    return r.json()


def _state(url: str, exp_id: int) -> str:
    return _get(url, f"/api/v1/experiments/{exp_id}")["experiment"]["state"]


def test_a_created_experiment_is_listed_and_draws_one_curve_per_trial(ui, cluster, tmp_path):
    config = yaml.safe_load((SPIRALS / "random.yaml").read_text())
    config["searcher"] |= {"max_trials": 2, "max_concurrent_trials": 1, "max_length": {"batches": 100}}
    exp_id = _create(cluster.url, tmp_path, config, SPIRALS)
    s = ui(cluster.url)
    s.page.goto("/experiments")
    s.page.wait_for_selector(f'tr[data-experiment="{exp_id}"]')
    wait_for(lambda: _state(cluster.url, exp_id) == "STATE_COMPLETED", TIMEOUT, "the experiment to complete")

    trials = _get(cluster.url, f"/api/v1/experiments/{exp_id}/trials")["trials"]
    want = {t["id"]: len(_get(cluster.url, f"/api/v1/trials/{t['id']}/metrics?group=training")["metrics"])
            for t in trials}
    s.page.goto(f"/experiments/{exp_id}")
    s.page.select_option("[data-chart-metric]", "training:loss")
    plot = s.page.locator("[data-chart-plot]")
    # The page first draws its default metric (validation): wait for the chart of the one chosen.
    s.page.wait_for_function("([n, m]) => { const d = document.querySelector('[data-chart-plot]').dataset;"
                             " return d.drawn === m && d.seriesCount === n; }", arg=[str(len(trials)), "training:loss"])
    drawn = dict(zip(map(int, plot.get_attribute("data-trial-ids").split(",")),
                     map(int, plot.get_attribute("data-point-counts").split(",")), strict=True))
    assert drawn == want and all(n > 0 for n in want.values())
    # uPlot holds them: one x column and one y column per trial, its points the API's reports.
    columns = s.page.evaluate("() => document.querySelectorAll('[data-chart-plot] .u-legend .u-series').length")
    assert columns == len(trials) + 1


def test_trial_logs_follow_a_running_trial(ui, cluster, tmp_path):
    exp_id = _ticker(cluster.url, tmp_path)
    trial_id = wait_for(lambda: _get(cluster.url, f"/api/v1/experiments/{exp_id}")["experiment"]["trialIds"],
                        TIMEOUT, "a trial")[0]
    s = ui(cluster.url)
    s.page.goto(f"/trials/{trial_id}")
    s.page.wait_for_function("() => /tick \\d+/.test(document.getElementById('log-lines').textContent)",
                             timeout=TIMEOUT * 1000)
    first = max(map(int, re.findall(r"tick (\d+)", s.page.inner_text("#log-lines"))))
    # Later lines arrive with no reload: the page's own poller appends them.
    s.page.wait_for_function(f"() => document.getElementById('log-lines').textContent.includes('tick {first + 10}\\n')",
                             timeout=TIMEOUT * 1000)
    assert s.page.evaluate("() => performance.getEntriesByType('navigation').length") == 1


def test_pause_changes_the_state_and_frees_the_slot(ui, cluster, tmp_path):
    exp_id = _ticker(cluster.url, tmp_path)
    wait_for(lambda: _busy_slots(cluster.url) == 1, TIMEOUT, "the trial to hold the slot")
    s = ui(cluster.url)
    s.page.goto("/experiments")
    s.page.click(f'button[data-api="POST /api/v1/experiments/{exp_id}/pause"]')
    s.page.wait_for_selector(f'tr[data-experiment="{exp_id}"][data-state="PAUSED"]', timeout=TIMEOUT * 1000)
    wait_for(lambda: _busy_slots(cluster.url) == 0, TIMEOUT, "the slot to be freed")
    assert "PAUSED" in _state(cluster.url, exp_id)
    s.page.wait_for_selector(f'button[data-api="POST /api/v1/experiments/{exp_id}/activate"]')


def test_a_viewer_sees_no_buttons_and_forged_posts_are_refused(ui, tmp_path, db_url):
    master = MasterProcess(tmp_path / "master", db_url).start()
    try:
        r = requests.post(f"{master.url}/api/v1/users", headers=_headers(master.url, "admin"), timeout=10,
                          json={"user": {"username": "vera", "role": "viewer"}, "password": "pw", "isHashed": False})
        assert r.status_code == 200, r.text
        exp_id = _ticker(master.url, tmp_path)  # no agent: it stays queued
        s = ui(master.url, "vera", "pw")
        for path in ("/experiments", f"/experiments/{exp_id}"):
            s.page.goto(path)
            s.page.wait_for_selector("#live")
            assert s.page.locator("[data-api], [data-api-form]").count() == 0, path
        pause = f"/api/v1/experiments/{exp_id}/pause"
        forged = s.page.request.post(pause, headers={"X-CSRF-Token": s.csrf()})
        assert forged.status == 403 and "may not edit" in forged.text()
        no_csrf = s.page.evaluate("(p) => fetch(p, {method: 'POST', credentials: 'same-origin'}).then(r => r.status)",
                                  pause)
        assert no_csrf == 403
        assert "ACTIVE" in _state(master.url, exp_id)
    finally:
        master.stop()
