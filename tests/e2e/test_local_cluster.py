"""The whole loop as a user drives it: deploy, search, describe, logs, agent loss, teardown."""

from __future__ import annotations

import json
import os
import signal

import pytest
import requests

from tests.e2e.conftest import EXAMPLE, pid_alive, processes_mentioning
from tests.support.cluster import login, wait_for
from tests.support.processes import descendants

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e


def test_random_search_on_two_agents(local_cluster):
    cluster = local_cluster(agents=2, slots=2)
    again = cluster.up()  # running it twice is harmless
    assert "already running" in again.stdout + again.stderr
    agents = json.loads(cluster.det("agent", "list", "--json").stdout)
    assert len(agents) == 2

    created = cluster.det("experiment", "create", str(EXAMPLE / "random.yaml"), str(EXAMPLE), "--json")
    exp_id = json.loads(created.stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=900)

    def gc_done():  # checkpoint GC runs after the experiment ends, on its own loop
        d = json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)
        return d if all(sum(c["state"] == "STATE_COMPLETED" for c in t["checkpoints"]) <= 2
                        for t in d["trials"]) else None

    described = wait_for(gc_done, 300, "checkpoint GC to keep each trial's best and latest")
    assert described["experiment"]["state"] == "STATE_COMPLETED"
    trials = described["trials"]
    assert len(trials) == 6
    assert all(t["state"] == "STATE_COMPLETED" for t in trials)
    for t in trials:
        steps = [m["stepsCompleted"] for m in t["metrics"]["validation"]]
        assert steps and steps[-1] == 300, steps
        assert t["metrics"]["training"], "training metrics missing"
        # GC keeps each trial's best and latest (Determined's save_* defaults); the rest go.
        latest = max(t["checkpoints"], key=lambda c: c["metadata"]["steps_completed"])
        assert latest["state"] == "STATE_COMPLETED", latest
        assert {c["state"] for c in t["checkpoints"]} <= {"STATE_COMPLETED", "STATE_DELETED",
                                                            "STATE_PARTIALLY_DELETED"}
        assert sum(c["state"] == "STATE_COMPLETED" for c in t["checkpoints"]) <= 2
    # Never more than max_concurrent_trials (4) at once: 4 slots, and the searcher's limit.
    assert len({json.dumps(t["hparams"], sort_keys=True) for t in trials}) == 6

    logs = cluster.det("trial", "logs", str(trials[0]["id"])).stdout
    assert "training {" in logs and "done:" in logs
    tail = cluster.det("trial", "logs", str(trials[0]["id"]), "--tail", "1").stdout
    assert len(tail.strip().splitlines()) == 1

    text = cluster.det("experiment", "describe", str(exp_id), "--metrics").stdout
    assert any(ch in text for ch in "▁▂▃▄▅▆▇█")

    pids = cluster.pids()
    cluster.down()
    for pid in [pids["master"], *pids["agents"]]:
        assert not pid_alive(pid)
    assert processes_mentioning(str(cluster.data_dir)) == []


def test_killed_agent_trial_resumes_on_the_other_agent(local_cluster, tmp_path):
    cluster = local_cluster(agents=2, slots=1)
    config = tmp_path / "long.yaml"
    config.write_text((EXAMPLE / "const.yaml").read_text())
    created = cluster.det("experiment", "create", str(config), str(EXAMPLE), "--json",
                          "--config", "searcher.max_length.batches=3000")
    exp_id = json.loads(created.stdout)["id"]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    def first_checkpoint():
        trials = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
        return trials and trials[0].get("latestCheckpointUuid") and trials[0]

    trial = wait_for(first_checkpoint, 180, "the first checkpoint")
    ckpt = trial["latestCheckpointUuid"]
    agents = s.get(f"{cluster.url}/api/v1/agents").json()["agents"]
    busy = [a["id"] for a in agents if any(sl["container"] for sl in a["slots"].values())]
    assert len(busy) == 1
    index = int(busy[0].rsplit("-", 1)[1])
    agent_pid = cluster.pids()["agents"][index]
    # Lose the whole "machine": the agent and the trial it runs.
    victims = descendants(agent_pid)  # its trial; never by name: other clusters may run here
    os.kill(agent_pid, signal.SIGKILL)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    cluster.det("experiment", "wait", str(exp_id), timeout=600)
    trial = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["restarts"] == 0  # a lost agent is not the trial's fault
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    # It resumed from the checkpoint seen before the kill, or a later one made before the kill.
    assert "resumed from checkpoint" in logs, logs[-2000:]
    resumed = [line for line in logs.splitlines() if "resumed from checkpoint" in line]
    assert ckpt in resumed[0] or int(resumed[0].rsplit(" ", 1)[1]) > trial_steps_at(ckpt, s, cluster.url)


def test_up_after_a_master_crash_keeps_the_agent_and_its_trial(local_cluster):
    """kill -9 of the master, then `det deploy local up`: only the master starts again; the agent
    (same pid) reconnects and its trial goes on in the same run, not restarted."""
    cluster = local_cluster(agents=1, slots=1)
    created = cluster.det("experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE), "--json",
                          "--config", "searcher.max_length.batches=100000")
    exp_id = json.loads(created.stdout)["id"]
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    def trial_reporting():
        trials = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials").json()["trials"]
        return trials and trials[0]["totalBatchesProcessed"] > 0 and trials[0]

    trial = wait_for(trial_reporting, 180, "the trial to report metrics")
    before = cluster.pids()
    os.kill(before["master"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(before["master"]), 10, "the master to die")

    again = cluster.up()
    after = cluster.pids()
    assert after["agents"] == before["agents"] and all(pid_alive(p) for p in after["agents"]), again.stderr
    assert after["master"] != before["master"] and pid_alive(after["master"])
    assert "kept running and reconnected" in again.stdout
    assert (cluster.data_dir / "logs" / "master.log.1").exists(), "the crashed master's log was not kept"

    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    def trial_progressed():
        t = s.get(f"{cluster.url}/api/v1/trials/{trial['id']}").json()["trial"]
        return t["totalBatchesProcessed"] > trial["totalBatchesProcessed"] and t

    now = wait_for(trial_progressed, 120, "the trial to report again")
    assert now["state"] == "STATE_RUNNING" and now["restarts"] == 0 and now["runId"] == trial["runId"] == 1, now


def trial_steps_at(ckpt: str, s: requests.Session, url: str) -> int:
    return s.get(f"{url}/api/v1/checkpoints/{ckpt}").json()["checkpoint"]["metadata"]["steps_completed"]
