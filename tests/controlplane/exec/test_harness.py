"""python3 -m controlplane.exec.harness module:Class: a PyTorchTrial from the experiment config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controlplane.exec import harness
from tests.controlplane.core.conftest import write_info

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "pytorch_trial"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k not in ("WORLD_SIZE", "RANK")}
    return {**env, **extra}


def _harness(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """One run (seconds; 120 s at most, so a test's two runs fit in its 300 s)."""
    return subprocess.run([sys.executable, "-m", "controlplane.exec.harness", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env or _env())


def test_off_the_cluster_from_a_config(tmp_path):
    ctx = tmp_path / "ctx"
    shutil.copytree(EXAMPLE, ctx)
    proc = _harness(ctx, "model_def:SyntheticTrial", "--config", "const.yaml", "--max-length", "40",
                    "--checkpoint-dir", str(tmp_path / "ckpts"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[metrics] training step=40" in proc.stdout and "[metrics] validation step=40" in proc.stdout
    (uuid,) = [p.name for p in (tmp_path / "ckpts").iterdir()]
    resumed = _harness(ctx, "model_def:SyntheticTrial", "--config", "const.yaml", "--max-length", "60",
                       "--checkpoint-dir", str(tmp_path / "ckpts"), "--latest-checkpoint", uuid)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"restoring the trial from checkpoint {uuid}" in resumed.stderr
    assert "[metrics] training step=60" in resumed.stdout and "step=20 " not in resumed.stdout


def test_on_the_cluster_periods_come_from_the_config(fake_master, tmp_path, monkeypatch):
    ctx = tmp_path / "ctx"
    shutil.copytree(EXAMPLE, ctx)
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config.update({"searcher": {**config["searcher"], "max_length": {"records": 32 * 30}},
                   "min_validation_period": {"batches": 10}, "min_checkpoint_period": {"batches": 25},
                   "scheduling_unit": 5, "checkpoint_policy": "none",
                   "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "shared")}})
    hparams = {k: v for k, v in config["hyperparameters"].items()}
    write_info(tmp_path / "info", fake_master.url, config, hparams=hparams)
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    monkeypatch.chdir(ctx)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "model_def", raising=False)
    assert harness.main(["model_def:SyntheticTrial"]) == 0
    reports = fake_master.metric_reports()
    assert [r["stepsCompleted"] for r in reports if r["group"] == "training"] == [5, 10, 15, 20, 25, 30]
    assert [r["stepsCompleted"] for r in reports if r["group"] == "validation"] == [10, 20, 30]
    checkpoints = fake_master.checkpoint_reports()
    assert [c.body["metadata"]["steps_completed"] for c in checkpoints] == [25, 30]
    # Each checkpoint holds the model's code (code/), as Determined's harness writes it: the context's
    # files when the trial started, not what training wrote into the working directory since.
    code = tmp_path / "shared" / checkpoints[-1].body["uuid"] / "code"
    assert sorted(p.name for p in code.iterdir()) == sorted(p.name for p in EXAMPLE.iterdir()
                                                            if p.name != "__pycache__")
    assert (code / "model_def.py").read_text() == (EXAMPLE / "model_def.py").read_text()


@pytest.mark.parametrize(("source", "spec", "message"), [
    ("from determined import pytorch\n", "trial_a:T",
     "trial_a imports Determined's package (determined); port it by changing `from determined import pytorch`"),
    ("class T:\n    pass\n", "trial_b:T", "trial_b:T is not a controlplane.pytorch.PyTorchTrial subclass"),
    ("", "trial_c:Missing", "module 'trial_c' has no 'Missing'"),
    ("", "nowhere:T", "no module 'nowhere' in the context directory"),
    ("", "no_colon", "the trial must be given as module:Class"),
])
def test_a_trial_that_cannot_run_is_named(tmp_path, source, spec, message):
    module = spec.partition(":")[0]
    if module.startswith("trial_"):
        (tmp_path / f"{module}.py").write_text(source)
    proc = _harness(tmp_path, spec, "--max-length", "1")
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_off_the_cluster_a_length_is_required(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "ctx")
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    del config["searcher"]["max_length"]
    (tmp_path / "ctx" / "nolength.yaml").write_text(json.dumps(config))
    proc = _harness(tmp_path / "ctx", "model_def:SyntheticTrial", "--config", "nolength.yaml")
    assert proc.returncode == 1 and "give --max-length N" in proc.stderr, proc.stderr[-2000:]
