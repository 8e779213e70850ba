"""`det deploy local up --autoscale`: the local provider starts agents for the work and stops
them when idle; nothing is left running afterwards."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import EXAMPLE, det, processes_mentioning
from tests.support.cluster import free_port, wait_for

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e


def test_instances_come_for_work_and_go_when_idle(tmp_path, db_url):
    data_dir = tmp_path / "auto"
    port = free_port()
    env = {"DET_MASTER": f"http://127.0.0.1:{port}", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    config = tmp_path / "master.yaml"
    config.write_text(json.dumps({"db": {"url": db_url}}))
    try:
        det("deploy", "local", "up", "--autoscale", "--agents", "2", "--slots-per-agent", "2", "--idle-period", "3s",
            "--port", str(port), "--data-dir", str(data_dir), "--master-config", str(config), env=env, timeout=120)
        assert json.loads(det("agent", "list", "--json", env=env).stdout) == []
        exp = json.loads(det("experiment", "create", str(EXAMPLE / "random.yaml"), str(EXAMPLE), "--json",
                             "--config", "searcher.max_trials=3", env=env).stdout)["id"]
        det("experiment", "wait", str(exp), env=env, timeout=600)

        def describe() -> dict:
            return json.loads(det("resource-pool", "describe", "default", "--json", env=env).stdout)

        launched = describe()["instances"]
        assert 1 <= len(launched) <= 2 and all(i["agentId"] for i in launched)
        def all_terminated() -> dict | None:
            d = describe()
            return d if all(i["state"] == "terminated" for i in d["instances"]) else None

        gone = wait_for(all_terminated, 60, "idle instances to be terminated")
        assert all("idle" in i["reason"] for i in gone["instances"])
        assert len(processes_mentioning(str(data_dir / "local-agents"))) == 0
    finally:
        det("deploy", "local", "down", "--data-dir", str(data_dir), env=env, check=False, timeout=120)
    assert processes_mentioning(str(data_dir)) == []
