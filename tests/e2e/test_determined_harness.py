"""Determined 0.38.1's own harness, unmodified, inside tasks.

The agents offer the real ``determined==0.38.1`` client (with torch and tensorboard, as
Determined's default images have them) as the task environment ``determined-0.38.1``. Determined's
Core API tutorials 1–4 (``determined_tutorials/``, byte for byte from its repository) and a
``PyTorchTrial`` written against ``determined.pytorch`` run there as Determined users run them, and
what the master then shows (metrics, checkpoints, the searcher's decisions, ranks) is checked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.cluster import login, wait_for
from tests.support.determined_venv import ENVIRONMENT_NAME
from tests.support.storage_servers import gcs_bucket, gcs_emulator, moto_s3, s3_bucket  # noqa: F401 (fixtures)

# SQLite (the default, `det deploy local`'s own): the scenario exercises processes, not SQL.
# The module shares a cluster (below): its tests run on one worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_determined_harness")]

HERE = Path(__file__).parent
TUTORIALS = HERE / "determined_tutorials"
PYTORCH_TRIAL = HERE / "determined_pytorch_trial"


@pytest.fixture
def cluster(shared_local_cluster, determined_venv):
    """The module's one 2x2 cluster: each test submits and waits out its own experiments. (The
    bucket test starts its own: the emulator reaches the cluster through variables set before it.)"""
    return shared_local_cluster(agents=2, slots=2, environments={ENVIRONMENT_NAME: determined_venv})


def submit(cluster, tmp_path: Path, stage: str, **changes) -> int:
    """Creates the tutorial ``stage`` from a context holding only its script; the config is
    Determined's, with the environment named and ``changes`` applied (as an operator would)."""
    context = tmp_path / stage
    context.mkdir()
    shutil.copy(TUTORIALS / f"{stage}.py", context)
    config = yaml.safe_load((TUTORIALS / f"{stage}.yaml").read_text())
    config["environment"] = {"image": ENVIRONMENT_NAME}
    config.update(changes)
    path = tmp_path / f"{stage}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(context)).stdout
    return int(re.search(r"Created experiment (\d+)", out).group(1))


def describe(cluster, exp_id: int) -> dict:
    return json.loads(cluster.det("experiment", "describe", str(exp_id), "--json").stdout)


def wait_done(cluster, exp_id: int) -> dict:
    cluster.det("experiment", "wait", str(exp_id), timeout=900, check=False)
    described = describe(cluster, exp_id)
    assert described["experiment"]["state"] == "STATE_COMPLETED", _why(cluster, described)
    return described


def _why(cluster, described: dict) -> str:
    trial = described["trials"][0] if described["trials"] else None
    logs = cluster.det("trial", "logs", str(trial["id"]), check=False).stdout if trial else ""
    return f"{described['experiment']['state']}\n{logs[-4000:]}"


def collected(cluster, exp_id: int) -> dict:
    """The experiment's trial once checkpoint GC, which runs after the experiment ends, has
    deleted every checkpoint it does not keep."""
    def done() -> dict | None:
        trial = describe(cluster, exp_id)["trials"][0]
        states = {c["state"] for c in trial["checkpoints"]}
        return trial if states <= {"STATE_COMPLETED", "STATE_DELETED"} and "STATE_DELETED" in states else None
    return wait_for(done, 300, "checkpoint GC")


def series(trial: dict, group: str, metric: str) -> list[tuple[int, float]]:
    return [(m["stepsCompleted"], m["metrics"][metric]) for m in trial["metrics"][group]]


def test_core_api_tutorials_1_to_3(cluster, tmp_path):
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {login(cluster.url)}"

    # Stage 2 first, alone: paused as soon as its trial has started, so the pause is pending from
    # the script's first preemption check (after its checkpoint at batch 10) whatever the load,
    # then activated: it must resume from the checkpoint it stored before it stopped.
    checkpoints_exp = submit(cluster, tmp_path, "2_checkpoints")

    def started() -> bool:
        trials = api.get(f"{cluster.url}/api/v1/experiments/{checkpoints_exp}/trials", timeout=10).json()["trials"]
        return bool(trials) and trials[0]["state"] == "STATE_RUNNING"

    wait_for(started, 300, "stage 2's trial to start", interval_s=0.05)
    api.post(f"{cluster.url}/api/v1/experiments/{checkpoints_exp}/pause", timeout=10).raise_for_status()
    task_id = describe(cluster, checkpoints_exp)["trials"][0]["taskId"]

    def stopped() -> bool:  # the experiment reads PAUSED at once; its trial's process ends later
        live = api.get(f"{cluster.url}/api/v1/tasks", timeout=10).json()["allocationIdToSummary"].values()
        return all(a["taskId"] != task_id for a in live)

    wait_for(stopped, 300, "the paused trial's process to stop")
    paused = describe(cluster, checkpoints_exp)["trials"][0]
    stored = [c["metadata"]["steps_completed"] for c in paused["checkpoints"] if c["state"] == "STATE_COMPLETED"]
    assert stored and max(stored) < 100, (
        f"it stopped with checkpoints {stored}:\n{_why(cluster, describe(cluster, checkpoints_exp))}")
    metrics_exp = submit(cluster, tmp_path, "1_metrics")
    search_exp = submit(cluster, tmp_path, "3_hpsearch")
    cluster.det("experiment", "activate", str(checkpoints_exp))

    # Stage 1: metrics reach the master (before, the harness found no cluster and dropped them).
    trial = wait_done(cluster, metrics_exp)["trials"][0]
    assert series(trial, "training", "x") == [(s, s) for s in range(10, 101, 10)]
    assert series(trial, "validation", "x") == [(100, 100)]

    described = wait_done(cluster, checkpoints_exp)
    trial = collected(cluster, checkpoints_exp)
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert logs.count("x is now 1\n") == 1, "the resumed run started over instead of from its checkpoint"
    assert "x is now 100" in logs and trial["runId"] >= 2
    assert series(trial, "validation", "x")[-1] == (100, 100)
    # Checkpoint GC kept the latest (Determined's default save_trial_latest: 1) and deleted the rest;
    # the kept one downloads through the master with the state the script wrote.
    storage = Path(described["experiment"]["config"]["checkpoint_storage"]["host_path"])
    kept = [c for c in trial["checkpoints"] if c["state"] == "STATE_COMPLETED"]
    deleted = [c for c in trial["checkpoints"] if c["state"] == "STATE_DELETED"]
    assert len(kept) == 1 and kept[0]["metadata"]["steps_completed"] == 100 and deleted
    assert all(not (storage / c["uuid"]).exists() for c in deleted)
    out = tmp_path / "downloaded"
    cluster.det("checkpoint", "download", kept[0]["uuid"], "--output-dir", str(out), "--mode", "master")
    assert (out / "state").read_text() == f"100,100,{trial['id']}"

    # Warm start (issue 27): a new experiment naming that checkpoint (x=100) as its searcher's
    # source_checkpoint_uuid, as a user fine-tunes: its trial's first run gets it as
    # DET_LATEST_CHECKPOINT, so its first batch makes x 101 (from scratch: 1), counting batches
    # afresh (the state holds another trial's id). It runs beside stage 3.
    warm_context = tmp_path / "warm"
    warm_context.mkdir()
    shutil.copy(TUTORIALS / "2_checkpoints.py", warm_context)
    out = cluster.det("experiment", "create", str(tmp_path / "2_checkpoints.yaml"), str(warm_context),
                      "--config", f"searcher.source_checkpoint_uuid={kept[0]['uuid']}").stdout
    warm_exp = int(re.search(r"Created experiment (\d+)", out).group(1))

    # Stage 3: adaptive ASHA over 10 trials; its early stops reach the real harness as preemptions.
    trials = wait_done(cluster, search_exp)["trials"]
    assert len(trials) == 10 and all(t["state"] == "STATE_COMPLETED" for t in trials)
    lengths = sorted(t["totalBatchesProcessed"] for t in trials)
    assert lengths[-1] == 100 and lengths[0] < 100, f"no trial was stopped early: {lengths}"
    for t in trials:
        validations = series(t, "validation", "x")
        assert validations and validations[-1] == (t["totalBatchesProcessed"],
                                                   t["hparams"]["increment_by"] * t["totalBatchesProcessed"])

    warm = wait_done(cluster, warm_exp)["trials"][0]
    assert warm["warmStartCheckpointUuid"] == kept[0]["uuid"]
    logs = cluster.det("trial", "logs", str(warm["id"])).stdout
    assert "x is now 101\n" in logs and "x is now 1\n" not in logs, logs[-4000:]
    assert series(warm, "validation", "x") == [(100, 200)]


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_the_harness_checkpoints_to_cloud_storage(kind, request, local_cluster, determined_venv, tmp_path):
    """Stage 2 with its checkpoints in a bucket (moto's S3, the GCS emulator): Determined's own
    storage managers write them, the master lists and downloads them and GC deletes the rest."""
    bucket = request.getfixturevalue(f"{kind}_bucket")  # gcs: STORAGE_EMULATOR_HOST reaches the tasks
    cluster = local_cluster(agents=1, slots=1, environments={ENVIRONMENT_NAME: determined_venv},
                            storage_choices=[{"name": "bucket", **bucket.config}])  # the admin's bucket
    storage = {**bucket.config, "prefix": "tut", "save_experiment_best": 0, "save_trial_best": 0,
               "save_trial_latest": 1}
    exp_id = submit(cluster, tmp_path, "2_checkpoints", checkpoint_storage=storage)
    wait_done(cluster, exp_id)
    trial = collected(cluster, exp_id)
    kept = [c for c in trial["checkpoints"] if c["state"] == "STATE_COMPLETED"]
    deleted = [c for c in trial["checkpoints"] if c["state"] == "STATE_DELETED"]
    assert [c["metadata"]["steps_completed"] for c in kept] == [100] and len(deleted) == 9
    # Beside the checkpoints, the harness syncs its TensorBoard files under the cluster's id.
    keys = bucket.keys("tut/")
    tensorboard = [k for k in keys if f"/tensorboard/experiment/{exp_id}/trial/{trial['id']}/" in k]
    assert tensorboard and {k.split("/")[1] for k in keys if k not in tensorboard} == {kept[0]["uuid"]}, keys
    out = tmp_path / "downloaded"
    cluster.det("checkpoint", "download", kept[0]["uuid"], "--output-dir", str(out), "--mode", "master")
    assert (out / "state").read_text() == f"100,100,{trial['id']}"


def test_core_api_tutorial_4_across_two_agents(cluster, tmp_path):
    # Determined's config asks for 8 slots; this cluster has two agents of two.
    exp_id = submit(cluster, tmp_path, "4_distributed", resources={"slots_per_trial": 4})
    trial = wait_done(cluster, exp_id)["trials"][0]
    # Every step adds each of the 4 workers' increment_by (an allgather across both agents).
    step = 4 * trial["hparams"]["increment_by"]
    assert series(trial, "training", "x") == [(s, s * step) for s in range(10, 101, 10)]
    for rank in range(4):
        logs = cluster.det("trial", "logs", str(trial["id"]), "--rank", str(rank)).stdout
        assert "worker starting" in logs, f"rank {rank}: {logs[-2000:]}"
    chief = cluster.det("trial", "logs", str(trial["id"]), "--rank", "0").stdout
    assert f"x is now {100 * step}" in chief
    assert trial["progress"] == 1.0  # the chief's report_progress


def test_a_pytorch_trial_under_determineds_torch_distributed_launcher(cluster, tmp_path):
    context = tmp_path / "model"
    shutil.copytree(PYTORCH_TRIAL, context)
    config = yaml.safe_load((PYTORCH_TRIAL / "const.yaml").read_text())
    config["environment"] = {"image": ENVIRONMENT_NAME}
    path = tmp_path / "const.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(context)).stdout
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))

    trial = wait_done(cluster, exp_id)["trials"][0]
    assert trial["totalBatchesProcessed"] == 40
    # Both workers trained: the harness averages each worker's world size over the workers.
    assert {w for _, w in series(trial, "training", "world_size")} == {2.0}
    losses = series(trial, "validation", "validation_loss")
    assert [s for s, _ in losses] == [20, 40] and losses[1][1] < losses[0][1]
    for rank in (0, 1):
        logs = cluster.det("trial", "logs", str(trial["id"]), "--rank", str(rank)).stdout
        assert logs.strip(), f"no log lines of rank {rank}"
    # Determined's checkpoint layout, with the model definition from the read-only model copy.
    best = [c for c in trial["checkpoints"] if c["state"] == "STATE_COMPLETED"][-1]
    out = tmp_path / "ckpt"
    cluster.det("checkpoint", "download", best["uuid"], "--output-dir", str(out), "--mode", "master")
    assert (out / "state_dict.pth").is_file() and (out / "code" / "model_def.py").is_file()


# Appended to the copy of model_def.py the pause/cancel test runs: 50 ms a batch, so a pause or a
# cancel asked for as the run starts lands well before the Trainer's next boundary (it looks at the
# preemption signal only at report, validation and checkpoint boundaries: every 100 batches here).
SLOW_TRIAL = """

import time


class SlowRegressionTrial(RegressionTrial):
    def train_batch(self, batch, epoch_idx: int, batch_idx: int) -> dict:
        time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def test_a_pytorch_trial_paused_or_canceled_mid_step_checkpoints_at_its_next_boundary(cluster, determined_venv,
                                                                                     tmp_path):
    """Determined's Trainer, paused then canceled (by Determined's own CLI) about 100 batches before a
    boundary: the master waits for it (its preemption timeout is Determined's hour), it checkpoints
    there and exits, the pause resumes from that checkpoint and the cancel ends trial and experiment
    CANCELED, unkilled."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DET_MASTER": cluster.url, "XDG_CONFIG_HOME": str(home / ".config")}

    def real_det(*args: str) -> None:
        proc = subprocess.run([str(determined_venv / "bin" / "det"), *args], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"det {args}: {proc.stdout}{proc.stderr}"

    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {login(cluster.url)}"
    context = tmp_path / "model"
    shutil.copytree(PYTORCH_TRIAL, context)
    with (context / "model_def.py").open("a") as f:
        f.write(SLOW_TRIAL)
    config = yaml.safe_load((PYTORCH_TRIAL / "const.yaml").read_text())
    # Determined 0.38.1 restores its RNG state (numpy arrays) with torch.load's default, which
    # torch >= 2.6 makes weights-only: resuming needs the old default back, as its users set it.
    config.update(environment={"image": ENVIRONMENT_NAME,
                               "environment_variables": ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1"]},
                  resources={"slots_per_trial": 1}, scheduling_unit=100,
                  entrypoint=config["entrypoint"].replace(":RegressionTrial", ":SlowRegressionTrial"))
    config["searcher"]["max_length"] = {"batches": 300}
    del config["min_validation_period"]
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cluster.det("experiment", "create", str(path), str(context)).stdout
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))

    def trial() -> dict:
        return describe(cluster, exp_id)["trials"][0]

    def running_run(run_id: int) -> bool:
        trials = api.get(f"{cluster.url}/api/v1/experiments/{exp_id}/trials", timeout=10).json()["trials"]
        return bool(trials) and trials[0]["state"] == "STATE_RUNNING" and trials[0]["runId"] == run_id

    def no_process() -> bool:
        live = api.get(f"{cluster.url}/api/v1/tasks", timeout=10).json()["allocationIdToSummary"].values()
        return all(a["taskId"] != task_id for a in live)

    def checkpointed() -> list[int]:  # the batches of every checkpoint stored (GC may delete all but the last)
        return sorted(c["metadata"]["steps_completed"] for c in trial()["checkpoints"]
                      if c["state"] in ("STATE_COMPLETED", "STATE_DELETED"))

    wait_for(lambda: running_run(1), 300, "the trial to start", interval_s=0.05)
    task_id = trial()["taskId"]
    real_det("experiment", "pause", str(exp_id))
    wait_for(no_process, 300, "the paused trial's process to stop")
    assert checkpointed() == [100], _why(cluster, describe(cluster, exp_id))
    assert describe(cluster, exp_id)["experiment"]["state"] == "STATE_PAUSED"

    real_det("experiment", "activate", str(exp_id))
    wait_for(lambda: running_run(2), 300, "the trial to resume", interval_s=0.05)
    real_det("experiment", "cancel", str(exp_id))  # graceful, as Determined's: not a kill
    described = wait_for(lambda: (d := describe(cluster, exp_id))["experiment"]["state"] == "STATE_CANCELED" and d,
                         300, "the canceled experiment to end")
    assert described["trials"][0]["state"] == "STATE_CANCELED"
    assert checkpointed() == [100, 200], _why(cluster, described)
    assert [s for s, _ in series(trial(), "training", "loss")] == [100, 200]  # resumed at 100, not from 0
    logs = cluster.det("trial", "logs", str(described["trials"][0]["id"])).stdout
    assert "[master] killed" not in logs, logs[-3000:]
