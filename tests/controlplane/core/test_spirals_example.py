"""examples/spirals/train.py runs unmodified off the cluster and against a (fake) master."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.controlplane.core.conftest import experiment_config, write_info

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "spirals"


def _run(work: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(PYTHONPATH=str(REPO), **extra_env)
    proc = subprocess.run([sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def test_off_cluster(tmp_path):
    work = tmp_path / "spirals"
    shutil.copytree(EXAMPLE, work)  # a copy: the run writes ./checkpoints
    proc = _run(work, {})
    assert "done:" in proc.stdout and "[metrics] validation step=200" in proc.stdout
    assert len(list((work / "checkpoints").iterdir())) == 2


def test_on_cluster_then_resume(tmp_path, fake_master):
    work = tmp_path / "spirals"
    shutil.copytree(EXAMPLE, work)
    storage = tmp_path / "shared"
    write_info(tmp_path / "info", fake_master.url, experiment_config(storage, {"batches": 100}), hparams={"lr": 0.05})
    proc = _run(work, {"DET_INFO_DIR": str(tmp_path / "info")})
    assert "done:" in proc.stdout and "[metrics]" not in proc.stdout
    (report,) = [r.body for r in fake_master.checkpoint_reports()]
    assert report["metadata"]["steps_completed"] == 100
    assert (storage / "ckpts" / report["uuid"] / "state.pt").exists()
    groups = [(r["group"], r["stepsCompleted"]) for r in fake_master.metric_reports()]
    assert ("validation", 100) in groups and ("training", 100) in groups
    assert fake_master.calls("POST", "/api/v1/trials/7/progress")[-1].body == {"progress": 1.0, "isRaw": True}

    write_info(tmp_path / "info", fake_master.url, experiment_config(storage, {"batches": 200}),
               latest_checkpoint=report["uuid"], steps_completed=100)
    proc = _run(work, {"DET_INFO_DIR": str(tmp_path / "info")})
    assert f"resumed from checkpoint {report['uuid']} at batch 100" in proc.stdout and "done:" in proc.stdout
    steps = sorted(json.dumps(r.body["metadata"]) for r in fake_master.checkpoint_reports())
    assert steps == ['{"steps_completed": 100}', '{"steps_completed": 200}']


def test_a_stop_at_the_last_batch_ends_the_trial_as_completed_not_preempted(tmp_path, fake_master):
    """ASHA stops a full-length trial right after its last validation: the trial says done and
    reports the operation completed; it does not claim a next run will resume it."""
    work = tmp_path / "spirals"
    shutil.copytree(EXAMPLE, work)
    write_info(tmp_path / "info", fake_master.url, experiment_config(tmp_path / "shared", {"batches": 100}))
    fake_master.preempt.set()
    proc = _run(work, {"DET_INFO_DIR": str(tmp_path / "info")})
    assert "preempted" not in proc.stdout and "done:" in proc.stdout, proc.stdout
