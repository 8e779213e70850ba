"""benchmarks/distributed_start.py runs end to end on a tiny size (one 4-rank start over two agents,
one all-reduce run each way on 0.1 MB) and its last line carries every figure. Only that it runs;
the figures are for the note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "distributed_start.py"
KEYS = {"start_p50_s", "start_max_s", "runs", "bare_torchrun_start_p50_s", "allreduce_launcher_mb_s",
        "allreduce_torchrun_mb_s", "allreduce_ratio", "targets", "targets_met"}


def test_tiny_run_prints_every_figure():
    out = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1", "--reps", "1", "--mb", "0.1", "--iters", "3"],
                         capture_output=True, text=True, timeout=240)  # ~20 s; below the test's 300 s
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    figures = {k: float(v) for k, v in (kv.split("=", 1) for kv in last.split())}
    assert KEYS <= figures.keys(), last
    assert figures["runs"] == 1 and figures["start_p50_s"] > 0 and figures["allreduce_launcher_mb_s"] > 0
    assert figures["allreduce_torchrun_mb_s"] > 0 and figures["targets"] == 2
