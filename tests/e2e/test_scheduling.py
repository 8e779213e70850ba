"""Scheduling on a real cluster: priority preemption that loses no work, and a gang across agents."""

from __future__ import annotations

import json
import re

import pytest
import requests

from tests.e2e.conftest import EXAMPLE, slow_first_run_example
from tests.support.cluster import login, wait_for

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e

REPORT_EVERY = 25  # examples/spirals/train.py
# The low-priority trial: at least 30 s in its first run (slow_first_run_example: 20 ms a batch), long
# enough that the high-priority experiment is created (a CLI call, seconds on a loaded machine) well
# before it could finish; after its preemption it resumes at full speed.
LOW_BATCHES = 1500
LOW_SLOW_S = 0.02


def _session(url: str) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(url)}"
    return s


def test_high_priority_preempts_low_priority_on_one_agent(local_cluster, tmp_path):
    cluster = local_cluster(agents=1, slots=1)
    s = _session(cluster.url)
    # Long enough that the high-priority experiment is created (a CLI call, seconds on a loaded
    # machine) well before the low one could finish (LOW_BATCHES).
    slow = slow_first_run_example(tmp_path, LOW_SLOW_S)
    low = json.loads(cluster.det("experiment", "create", str(slow / "const.yaml"), str(slow), "--json",
                                 "--config", f"searcher.max_length.batches={LOW_BATCHES}",
                                 "--config", "resources.priority=50").stdout)["id"]

    def low_checkpointed():
        trials = s.get(f"{cluster.url}/api/v1/experiments/{low}/trials").json()["trials"]
        return trials and trials[0].get("latestCheckpointUuid") and trials[0]

    low_trial = wait_for(low_checkpointed, 120, "the low-priority trial's first checkpoint")
    high = json.loads(cluster.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE), "--json",
                                  "--config", "resources.priority=10").stdout)["id"]
    cluster.det("experiment", "wait", str(high), timeout=300)
    cluster.det("experiment", "wait", str(low), timeout=600)

    # The low trial gave its slot up (a second run) and finished after the high one: the order in
    # which they ended, read from the master, not the state at one moment (on a loaded machine the
    # low trial's last batches after its resume can end before `wait` sees the high one done).
    trial = s.get(f"{cluster.url}/api/v1/trials/{low_trial['id']}").json()["trial"]
    assert trial["state"] == "STATE_COMPLETED" and trial["restarts"] == 0 and trial["runId"] >= 2, trial
    high_trial = s.get(f"{cluster.url}/api/v1/experiments/{high}/trials").json()["trials"][0]
    assert high_trial["state"] == "STATE_COMPLETED" and high_trial["endTime"] < trial["endTime"]
    steps = sorted(m["stepsCompleted"] for m in s.get(
        f"{cluster.url}/api/v1/trials/{low_trial['id']}/metrics?group=training&limit=1000").json()["metrics"])
    assert steps == list(range(REPORT_EVERY, LOW_BATCHES + 1, REPORT_EVERY)), "completed steps were lost or redone"
    logs = cluster.det("trial", "logs", str(low_trial["id"])).stdout
    assert "preempted at batch" in logs and "resumed from checkpoint" in logs


GANG_SCRIPT = """\
import json, os
info = json.load(open(os.path.join(os.environ["DET_INFO_DIR"], "rendezvous.json")))
print(f"rank {info['container_rank']} of {len(info['container_addrs'])} "
      f"on {os.environ['DET_AGENT_ID']} slots {os.environ['DET_SLOT_IDS']}", flush=True)
"""


def test_four_slot_trial_runs_as_one_gang_on_two_agents(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=2)
    context = tmp_path / "gang"
    context.mkdir()
    (context / "gang.py").write_text(GANG_SCRIPT)
    config = tmp_path / "gang.yaml"
    config.write_text("name: gang\nentrypoint: python3 gang.py\nresources:\n  slots_per_trial: 4\n"
                      "searcher:\n  name: single\n  metric: x\n  max_length: 1\n")
    exp_id = json.loads(cluster.det("experiment", "create", str(config), str(context), "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=120)
    trial_id = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)["trials"][0]["id"]
    logs = cluster.det("trial", "logs", str(trial_id)).stdout
    ranks = dict(re.findall(r"rank (\d) of 2 on (local-agent-\d) slots \[0, 1\]", logs))
    assert set(ranks) == {"0", "1"} and len(set(ranks.values())) == 2, logs

    config.write_text(config.read_text().replace("slots_per_trial: 4", "slots_per_trial: 3"))
    refused = cluster.det("experiment", "create", str(config), str(context), check=False)
    assert refused.returncode == 1 and "cannot run" in refused.stderr and "Traceback" not in refused.stderr


def test_pause_frees_the_slot_and_activate_resumes_without_lost_steps(local_cluster):
    cluster = local_cluster(agents=1, slots=1)
    s = _session(cluster.url)
    exp_id = json.loads(cluster.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE), "--json",
                                    "--config", "searcher.max_length.batches=2000").stdout)["id"]

    def first_trial():
        trials = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
        return trials and trials[0]

    trial = wait_for(lambda: (t := first_trial()) and t.get("latestCheckpointUuid") and t, 120, "a checkpoint")
    cluster.det("experiment", "pause", str(exp_id))

    def paused_and_free():
        t = first_trial()
        agents = s.get(f"{cluster.url}/api/v1/agents").json()["agents"]
        free = all(slot["container"] is None for a in agents for slot in a["slots"].values())
        return t["state"] == "STATE_PAUSED" and free

    wait_for(paused_and_free, 60, "the trial to pause and free its slot")
    cluster.det("experiment", "activate", str(exp_id))
    cluster.det("experiment", "wait", str(exp_id), timeout=600)
    trial = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
    assert trial["state"] == "STATE_COMPLETED" and trial["restarts"] == 0
    steps = sorted(m["stepsCompleted"] for m in s.get(
        f"{cluster.url}/api/v1/trials/{trial['id']}/metrics?group=training").json()["metrics"])
    assert steps == list(range(REPORT_EVERY, 2001, REPORT_EVERY))
    assert "resumed from checkpoint" in cluster.det("trial", "logs", str(trial["id"])).stdout
