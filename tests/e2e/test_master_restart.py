"""kill -9 of the master mid-trial: state comes back from the database, the agent reconnects,
the running trial is re-attached and finishes, nothing is duplicated and no metric is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from tests.e2e.conftest import EXAMPLE
from tests.support.cluster import login, wait_for

# PostgreSQL: state that survives kill -9 of the master is a production cluster's, on PostgreSQL.
pytestmark = [pytest.mark.e2e, pytest.mark.one_database("postgres")]

REPORT_EVERY = 25  # examples/spirals/train.py


def test_master_killed_and_restarted_mid_trial(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    created = cluster.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE), "--json",
                          "--config", "searcher.max_length.batches=4000")
    exp_id = json.loads(created.stdout)["id"]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    def trial_with_progress():
        trials = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
        return trials and trials[0]["totalBatchesProcessed"] >= 200 and trials[0]

    trial = wait_for(trial_with_progress, 120, "the trial to report metrics")
    os.kill(cluster.pids()["master"], signal.SIGKILL)
    # The agent retries with a backoff that grows to 10 s (12.5 with jitter) while the master is
    # down; the restarted master must wait longer than that for it, or a slow restart under load
    # would declare the agent lost and re-run the trial (the shared clusters' 4 s is for tests of loss).
    config_file = cluster.data_dir / "master.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["agent_reconnect_wait"] = "60s"
    config_file.write_text(yaml.safe_dump(config))

    log = open(cluster.data_dir / "logs" / "master-restarted.log", "ab")
    master = subprocess.Popen([str(Path(sys.executable).parent / "det-master"), "--config",
                               str(cluster.data_dir / "master.yaml")], stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        wait_for(lambda: _answers(cluster.url), 60, "the restarted master")
        s.headers["Authorization"] = f"Bearer {login(cluster.url)}"  # sessions survive, but log in anyway
        cluster.det("experiment", "wait", str(exp_id), timeout=600)
        trial = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
        assert trial["state"] == "STATE_COMPLETED"
        assert trial["restarts"] == 0 and trial["runId"] == 1, trial  # re-attached, not re-run
        metrics = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}/metrics?group=training").json()["metrics"]
        steps = [m["stepsCompleted"] for m in metrics]
        assert steps == list(range(REPORT_EVERY, 4001, REPORT_EVERY)), "a training report was lost or duplicated"
        restarted_log = (cluster.data_dir / "logs" / "master-restarted.log").read_text()
        assert "1 slot(s), 1 running" in restarted_log, "the agent did not re-attach its running trial"
    finally:
        os.killpg(master.pid, signal.SIGTERM)
        master.wait(30)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/info", timeout=1).status_code == 200
    except requests.RequestException:
        return False
