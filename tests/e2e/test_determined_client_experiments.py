"""The unmodified Determined 0.38.1 CLI and SDK change experiments, trials and checkpoints on this
master: `det e create --test`, `det e set`/`config`, pause of an ended experiment, `det e continue`,
archive/unarchive, `det trial kill`, `det e delete`, `det checkpoint delete`, `det checkpoint rm --glob`,
`det e move`; and the SDK's metric iterators and streams, summary metrics, checkpoint metadata, labels,
archive and delete, `list_experiments` filters and the experiment/trial summary fields."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from tests.e2e.conftest import EXAMPLE
from tests.support.cluster import login, wait_for

pytestmark = [
    pytest.mark.e2e,
    # PostgreSQL: the real Determined client drives the master as Determined's users run it, on PostgreSQL.
    pytest.mark.one_database("postgres"),
    pytest.mark.timeout(900),
]

SDK_SCRIPT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from determined.experimental import client

master, exp_id, trial_id, delete_id = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
client.login(master=master, user="determined", password="")
out = {}
# list_experiments' filters (a substring of the name, labels, ids), as GetExperiments answers them
out["by_name"] = [e.id for e in client.list_experiments(name="E2E-Main")]
out["by_ids"] = [e.id for e in client.list_experiments(experiment_ids=[exp_id, delete_id])]
from determined.common.api import bindings
sess = client._determined._session
bexp = bindings.get_GetExperiment(sess, experimentId=exp_id).experiment
out["exp_fields"] = [bexp.searcherMetric, bexp.bestTrialId, bexp.bestTrialSearcherMetric is not None,
                     bexp.checkpointCount, int(bexp.checkpointSize) > 0, bexp.duration >= 0,
                     sorted(bexp.hyperparameters or {})]
btrial = bindings.get_GetTrial(sess, trialId=trial_id).trial
out["trial_fields"] = [btrial.bestCheckpoint.totalBatches if btrial.bestCheckpoint else None,
                       btrial.checkpointCount, int(btrial.totalCheckpointSize) > 0, btrial.wallClockTime > 0,
                       btrial.warmStartCheckpointUuid]
trial = client.get_trial(trial_id)
out["training"] = [(m.steps_completed, m.group, sorted(m.metrics)) for m in trial.iter_metrics("training")]
out["validation"] = [(m.steps_completed, m.group, sorted(m.metrics)) for m in trial.iter_metrics("validation")]
out["stream_training"] = [m.steps_completed for m in trial.stream_training_metrics()]
out["stream_validation"] = [(m.steps_completed, sorted(m.metrics)) for m in trial.stream_validation_metrics()]
out["summary"] = trial.summary_metrics
ckpt = trial.list_checkpoints()[0]
ckpt.add_metadata({"reviewed": "yes"})
out["metadata"] = client.get_checkpoint(ckpt.uuid).metadata
exp = client.get_experiment(exp_id)
exp.add_label("sdk-label")
exp.reload()
out["labels"] = sorted(exp.labels)
exp.archive()
exp.reload()
out["archived"] = exp.archived
exp.unarchive()
exp.reload()
out["unarchived"] = exp.archived
client.get_experiment(delete_id).delete()
try:
    client.get_experiment(delete_id)
    out["deleted"] = False
except Exception as e:
    out["deleted"] = type(e).__name__
print("SDK-RESULT " + json.dumps(out))
"""


class RealClient:
    def __init__(self, venv: Path, url: str, home: Path) -> None:
        self.venv, self.url = venv, url
        self.env = {**os.environ, "HOME": str(home), "DET_MASTER": url, "XDG_CONFIG_HOME": str(home / ".config")}
        self.token = login(url)

    def det(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(self.venv / "bin" / "det"), *args], capture_output=True, text=True,
                              env=self.env, timeout=600)
        if ok:
            assert proc.returncode == 0, f"det {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def get(self, path: str) -> requests.Response:
        return requests.get(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def experiment(self, exp_id: int) -> dict:
        r = self.get(f"/api/v1/experiments/{exp_id}")
        assert r.status_code == 200, r.text
        return r.json()["experiment"]

    def trials(self, exp_id: int) -> list[dict]:
        return self.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]

    def wait_state(self, exp_id: int, *states: str, timeout: float = 300) -> dict:
        return wait_for(lambda: (e := self.experiment(exp_id))["state"] in states and e, timeout,
                        f"experiment {exp_id} to reach {states}", interval_s=0.5)


def write_config(tmp_path: Path, name: str, batches: int, /, **extra) -> Path:
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": batches}
    config.update(extra)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def created_id(out: str) -> int:
    return int(re.search(r"Created (?:test )?experiment (\d+)", out).group(1))


def test_determined_client_changes_experiments_trials_and_checkpoints(local_cluster, determined_venv, tmp_path):
    cluster = local_cluster(agents=1, slots=2)
    home = tmp_path / "home"
    home.mkdir()
    det = RealClient(determined_venv, cluster.url, home)

    # --test: the client sends a checkpoint_storage of only save_* keys; checkpoint_policy is Determined's key.
    test_cfg = write_config(tmp_path, "test", 50, checkpoint_policy="best")
    out = det.det("experiment", "create", "--test-mode", str(test_cfg), str(EXAMPLE)).stdout
    assert "Experiment configuration validation succeeded" in out and "Created test experiment" in out, out
    test_id = created_id(out)
    assert det.experiment(test_id)["state"] == "STATE_COMPLETED"
    assert det.experiment(test_id)["config"]["checkpoint_storage"]["type"] == "shared_fs"

    # A partial checkpoint_storage on a normal create, `det e set`, `det e config`.
    main_cfg = write_config(tmp_path, "main", 50, checkpoint_storage={"save_trial_best": 5, "save_trial_latest": 5},
                            name="spirals-e2e-main")
    exp_id = created_id(det.det("experiment", "create", str(main_cfg), str(EXAMPLE)).stdout)
    det.det("experiment", "set", "priority", str(exp_id), "7")
    det.det("experiment", "set", "max-slots", str(exp_id), "2")
    shown = yaml.safe_load(det.det("experiment", "config", str(exp_id)).stdout)
    assert shown["resources"]["priority"] == 7 and shown["resources"]["max_slots"] == 2, shown["resources"]
    assert shown["checkpoint_storage"]["type"] == "shared_fs" and shown["checkpoint_storage"]["save_trial_best"] == 5
    det.wait_state(exp_id, "STATE_COMPLETED")

    # Pausing an ended experiment is refused with a 409, which the client reports (no 500).
    refused = det.det("experiment", "pause", str(exp_id), ok=False)
    assert refused.returncode != 0 and "COMPLETED" in refused.stdout + refused.stderr, refused
    assert "500" not in refused.stdout + refused.stderr

    # Continue: the single trial resumes from its checkpoint at 50 and trains to 100.
    out = det.det("experiment", "continue", str(exp_id), "--config", "searcher.max_length.batches=100").stdout
    assert f"Continued experiment {exp_id}" in out, out
    det.wait_state(exp_id, "STATE_COMPLETED")
    (trial,) = det.trials(exp_id)
    assert trial["totalBatchesProcessed"] == 100 and trial["state"] == "STATE_COMPLETED"
    logs = det.det("trial", "logs", str(trial["id"])).stdout
    assert "resumed from checkpoint" in logs and "at batch 50" in logs, logs[-2000:]

    # Archive / unarchive with the CLI.
    det.det("experiment", "archive", str(exp_id))
    listed = det.det("experiment", "list").stdout
    assert not re.search(rf"^\s*{exp_id}\s", listed, re.M), listed
    assert re.search(rf"^\s*{exp_id}\s", det.det("experiment", "list", "--all").stdout, re.M)
    det.det("experiment", "unarchive", str(exp_id))
    assert det.experiment(exp_id)["archived"] is False

    # det checkpoint delete: the older of the trial's two checkpoints.
    ckpts = det.get(f"/api/v1/trials/{trial['id']}/checkpoints").json()["checkpoints"]
    older = min(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    assert older["metadata"]["steps_completed"] == 50 and len(ckpts) == 2
    out = det.det("checkpoint", "delete", older["uuid"], "--yes").stdout
    assert "is in progress" in out
    assert older["uuid"] in det.det("checkpoint", "describe", older["uuid"]).stdout
    assert det.get(f"/api/v1/checkpoints/{older['uuid']}").json()["checkpoint"]["state"] == "STATE_DELETED"

    # det checkpoint rm --glob: the newer checkpoint loses its weights, keeps metadata.json.
    newer = max(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    assert newer["training"]["hparams"] is not None  # checkpoint.training.hparams: the trial's
    out = det.det("checkpoint", "rm", newer["uuid"], "--glob", "*.pt", "--yes").stdout
    assert "Removal of files from checkpoints" in out, out
    left = det.get(f"/api/v1/checkpoints/{newer['uuid']}").json()["checkpoint"]
    assert left["state"] == "STATE_COMPLETED" and sorted(left["resources"]) == ["metadata.json"], left

    # det e move: into a project of a new workspace, which the answers then name.
    det.det("workspace", "create", "e2e-space")
    det.det("project", "create", "e2e-space", "e2e-project")
    assert "Moved experiment" in det.det("experiment", "move", str(exp_id), "e2e-space", "e2e-project").stdout
    moved = det.experiment(exp_id)
    assert (moved["workspaceName"], moved["projectName"]) == ("e2e-space", "e2e-project"), moved
    det.det("experiment", "set", "weight", str(exp_id), "2")  # stored under the priority scheduler
    assert det.experiment(exp_id)["config"]["resources"]["weight"] == 2

    # det trial kill on a long trial, then det e delete of its (ended) experiment.
    long_cfg = write_config(tmp_path, "long", 1_000_000)
    long_id = created_id(det.det("experiment", "create", str(long_cfg), str(EXAMPLE)).stdout)
    running = wait_for(lambda: [t for t in det.trials(long_id) if t["state"] == "STATE_RUNNING"], 120,
                       "the long trial to run", interval_s=0.5)[0]
    refused = det.det("experiment", "delete", str(long_id), "--yes", ok=False)
    assert refused.returncode != 0 and "only an ended experiment" in refused.stdout + refused.stderr
    det.det("trial", "kill", str(running["id"]))
    # A user's cancel is no failure (Determined's searcher.go): its only trial killed, it is CANCELED.
    assert det.wait_state(long_id, "STATE_ERROR", "STATE_CANCELED")["state"] == "STATE_CANCELED"
    assert det.trials(long_id)[0]["state"] == "STATE_CANCELED"
    out = det.det("experiment", "delete", str(long_id), "--yes").stdout
    assert f"Deletion of experiment {long_id} is in progress" in out
    assert det.get(f"/api/v1/experiments/{long_id}").status_code == 404
    assert det.get(f"/api/v1/trials/{running['id']}").status_code == 404

    # The SDK: metrics, summary metrics, checkpoint metadata, labels, archive, delete.
    script = tmp_path / "sdk.py"
    script.write_text(SDK_SCRIPT)
    proc = subprocess.run([str(determined_venv / "bin" / "python"), str(script), cluster.url, str(exp_id),
                           str(trial["id"]), str(test_id)], capture_output=True, text=True, env=det.env, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.split("SDK-RESULT ", 1)[1])
    assert result["training"] == [[s, "training", ["loss"]] for s in (25, 50, 75, 100)]
    assert result["validation"] == [[s, "validation", ["accuracy", "validation_loss"]] for s in (50, 100)]
    assert result["stream_training"] == [25, 50, 75, 100]
    assert result["stream_validation"] == [[50, ["accuracy", "validation_loss"]], [100, ["accuracy",
                                                                                          "validation_loss"]]]
    summary = result["summary"]
    assert summary["avg_metrics"]["loss"]["count"] == 4 and summary["avg_metrics"]["loss"]["type"] == "number"
    val = summary["validation_metrics"]["validation_loss"]
    assert val["count"] == 2 and val["min"] <= val["max"] and val["last"] is not None
    assert result["metadata"]["reviewed"] == "yes" and result["metadata"]["steps_completed"] in (50, 100)
    assert result["labels"] == ["sdk-label"]
    assert result["archived"] is True and result["unarchived"] is False
    assert result["deleted"] == "NotFoundException"
    assert result["by_name"] == [exp_id] and result["by_ids"] == [test_id, exp_id]
    hparams = ["batch_size", "dropout", "hidden", "layers", "lr"]
    assert result["exp_fields"] == ["validation_loss", trial["id"], True, 1, True, True, hparams], result["exp_fields"]
    best, *rest = result["trial_fields"]
    assert best in (100, None) and rest == [1, True, True, None], result["trial_fields"]  # 50's is deleted
    assert det.get(f"/api/v1/experiments/{test_id}").status_code == 404
