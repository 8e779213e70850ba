"""The example's training script runs unchanged on a laptop (no master, no agent)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spirals"


def test_train_py_runs_off_cluster(tmp_path):
    work = tmp_path / "spirals"
    shutil.copytree(EXAMPLE, work)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    proc = subprocess.run([sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[metrics] validation step=200" in proc.stdout and "done:" in proc.stdout
    assert len(list((work / "checkpoints").iterdir())) == 2
