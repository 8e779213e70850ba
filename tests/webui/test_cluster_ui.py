"""The Cluster page in a browser against `det deploy local up --autoscale` (the `local` provider
starts real agent processes): an instance appears with the reason it was launched and goes with
the reason it was stopped (idle), while the page stays loaded."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import det, kill_if_alive, processes_mentioning
from tests.support.cluster import free_port, wait_for

# SQLite (the default): the pages and the processes behind them are under test, not SQL.
pytestmark = pytest.mark.e2e

SHORT_JOB = "import time\ntime.sleep(5)\nprint('done', flush=True)\n"


@pytest.fixture
def autoscaled(tmp_path, db_url):
    data_dir = tmp_path / "auto"
    port = free_port()
    env = {"DET_MASTER": f"http://127.0.0.1:{port}", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    config = tmp_path / "master.yaml"
    config.write_text(json.dumps({"db": {"url": db_url}}))
    try:
        det("deploy", "local", "up", "--autoscale", "--agents", "1", "--slots-per-agent", "1", "--idle-period", "8s",
            "--port", str(port), "--data-dir", str(data_dir), "--master-config", str(config), env=env, timeout=180)
        yield env
    finally:
        det("deploy", "local", "down", "--data-dir", str(data_dir), env=env, check=False, timeout=120)
        for pid in processes_mentioning(str(data_dir)):
            kill_if_alive(pid)


def _instances(page) -> dict[str, dict]:
    """Instance id -> {state, reason} as the page shows them now."""
    rows = page.eval_on_selector_all(
        "table.instances tr[data-instance]",
        "rows => rows.map(r => [r.dataset.instance, r.dataset.state, r.querySelector('td.reason').textContent.trim()])")
    return {i: {"state": state, "reason": reason} for i, state, reason in rows}


def test_an_instance_appears_with_its_launch_reason_and_goes_idle_live(ui, autoscaled, tmp_path):
    env = autoscaled
    s = ui(env["DET_MASTER"])
    page = s.page
    page.goto("/cluster")
    page.wait_for_selector('section.autoscaler[data-pool="default"]')
    assert _instances(page) == {}
    page.evaluate("window.__not_reloaded = true")

    context = tmp_path / "ctx"
    context.mkdir()
    (context / "job.py").write_text(SHORT_JOB)
    config = tmp_path / "job.yaml"
    config.write_text("name: short\nentrypoint: python3 job.py\n"
                      "searcher:\n  name: single\n  metric: x\n  max_length: 1\n")
    det("experiment", "create", str(config), str(context), env=env)

    # It appears, live, with the reason the autoscaler launched it (what `det resource-pool describe` says).
    shown = wait_for(lambda: _instances(page), 120, "an instance on the page")
    (instance_id,) = shown
    described = json.loads(det("resource-pool", "describe", "default", "--json", env=env).stdout)
    launch = next(i for i in described["instances"] if i["id"] == instance_id)
    if launch["state"] != "terminated":  # still its launch reason (the page showed it before any stop)
        assert shown[instance_id]["reason"] == launch["reason"] and launch["reason"]
    assert shown[instance_id]["state"] != "terminated" and shown[instance_id]["reason"].startswith("launch "), shown

    # It goes, live, with the reason it was stopped.
    gone = wait_for(lambda: (d := _instances(page)) and d[instance_id]["state"] == "terminated" and d, 240,
                    "the idle instance to be shown terminated")
    assert "idle" in gone[instance_id]["reason"], gone
    assert page.evaluate("window.__not_reloaded") is True
    assert page.locator(f'tr[data-instance="{instance_id}"] td:nth-child(5)').inner_text() in ("on-demand", "spot")
