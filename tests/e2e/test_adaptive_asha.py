"""adaptive_asha on a real local cluster: trials that rank badly at a rung are stopped early and the
experiment completes.

One trial trains at a time (``max_concurrent_trials: 1``), so the order in which validations reach
the searcher, and with it every decision, follows from the experiment seed alone; the test predicts
each trial's length with the same pure searcher and checks the cluster did exactly that. The trial
reports each validation synchronously and then asks the master for its preemption signal, so a stop
is seen at the very next boundary however loaded the machine is.
"""

from __future__ import annotations

import json

import pytest
import requests
import yaml

from controlplane.config.experiment import parse_experiment_config
from controlplane.searchers import Create, Stop, make_searcher
from tests.support.cluster import login

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
pytestmark = pytest.mark.e2e

LENGTH, EVERY, SEED = 16, 4, 3  # seed 3: one trial trains the full 16 batches, four are stopped at 4 or 8

TRAIN = """\
import json, os, time, urllib.request

from controlplane import core

LENGTH, EVERY = @LENGTH@, @EVERY@


def call(method, path, body=None):
    req = urllib.request.Request(os.environ["DET_MASTER"].rstrip("/") + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Grpc-Metadata-x-allocation-token":
                                          "Bearer " + os.environ["DET_SESSION_TOKEN"]})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"{}")


with core.init() as ctx:
    x = float(ctx.info.trial.hparams["x"])
    trial, run = int(os.environ["DET_TRIAL_ID"]), int(os.environ["DET_TRIAL_RUN_ID"])
    for batches in range(1, LENGTH + 1):
        time.sleep(0.01)  # a batch
        if batches % EVERY:
            continue
        loss = x + 1.0 / batches
        ctx.train.report_training_metrics(batches, {"loss": loss})
        # answered once stored and seen by the searcher, so the signal below already holds its decision
        call("POST", f"/api/v1/trials/{trial}/metrics", {"group": "validation", "metrics": {
            "trialId": trial, "trialRunId": run, "stepsCompleted": batches, "reportTime": None,
            "metrics": {"avgMetrics": {"loss": loss}}}})
        if call("GET", f"/api/v1/allocations/{os.environ['DET_ALLOCATION_ID']}/signals/preemption"
                       "?timeout_seconds=0")["preempt"]:
            print(f"stopped by the searcher at batch {batches}", flush=True)
            break
    else:
        print(f"trained all {LENGTH} batches", flush=True)
""".replace("@LENGTH@", str(LENGTH)).replace("@EVERY@", str(EVERY))

CONFIG = {
    "name": "asha-e2e",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
    "searcher": {"name": "adaptive_asha", "metric": "loss", "mode": "aggressive", "max_trials": 5,
                 "max_concurrent_trials": 1, "divisor": 2, "max_rungs": 3, "time_metric": "batches",
                 "max_time": LENGTH},
    "reproducibility": {"experiment_seed": SEED},
    "max_restarts": 0,
}


def predicted() -> list[tuple[float, int]]:
    """(x, batches trained) of each trial in creation order, from the pure searcher."""
    searcher = make_searcher(parse_experiment_config(CONFIG))
    queue, out = list(searcher.initial_actions()), []
    while queue:
        create = queue.pop(0)
        assert isinstance(create, Create)
        x, trained = create.hparams["x"], LENGTH
        for batches in range(EVERY, LENGTH + 1, EVERY):
            actions = searcher.on_validation(create.request_id, x + 1.0 / batches, batches)
            queue += [a for a in actions if isinstance(a, Create)]
            if Stop(create.request_id) in actions:
                trained = batches
                break
        searcher.on_trial_exited(create.request_id, "completed")
        out.append((x, trained))
    return out


def test_adaptive_asha_stops_trials_early_and_completes(local_cluster, tmp_path):
    expected = predicted()
    assert len(expected) == 5 and 1 <= sum(t < LENGTH for _, t in expected) < 5  # the seed shows both
    cluster = local_cluster(agents=1, slots=2)
    context = tmp_path / "asha"
    context.mkdir()
    (context / "train.py").write_text(TRAIN)
    config = tmp_path / "asha.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    exp_id = json.loads(cluster.det("experiment", "create", str(config), str(context), "--json").stdout)["id"]
    cluster.det("experiment", "wait", str(exp_id), timeout=900)

    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {login(cluster.url)}"
    exp = s.get(f"{cluster.url}/api/v1/experiments/{exp_id}", timeout=30).json()["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["searcherType"] == "adaptive_asha", exp
    trials = sorted(s.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials", timeout=30).json()["trials"],
                    key=lambda t: t["id"])
    assert all(t["state"] == "STATE_COMPLETED" for t in trials), [t["state"] for t in trials]
    got = [(t["hparams"]["x"], t["totalBatchesProcessed"]) for t in trials]
    assert got == expected
    stopped = [t for t in trials if t["totalBatchesProcessed"] < LENGTH]
    assert stopped, "no trial was stopped early"
    for t in trials:
        validations = s.get(f"{cluster.url}/api/v1/trials/{t['id']}/metrics", params={"group": "validation"},
                            timeout=30).json()["metrics"]
        assert [v["stepsCompleted"] for v in validations] == \
            list(range(EVERY, t["totalBatchesProcessed"] + 1, EVERY))
    logs = cluster.det("trial", "logs", str(stopped[0]["id"])).stdout
    assert f"stopped by the searcher at batch {stopped[0]['totalBatchesProcessed']}" in logs, logs[-2000:]
