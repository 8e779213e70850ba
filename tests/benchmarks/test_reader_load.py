"""benchmarks/reader_load.py runs end to end on a tiny load (10 followers of 2 users, one metric
reader, 2,000 lines and rows, 2 s): every follower is admitted and stays open, no probe fails, and
its last line carries every figure. Only that it runs; the figures are for the note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reader_load.py"
TINY = ("--followers", "10", "--metric-readers", "1", "--users", "2", "--log-lines", "2000", "--metric-rows", "2000",
        "--duration", "2", "--warmup", "1")
FIGURES = ("info_p50_ms", "info_p99_ms", "list_p50_ms", "list_p99_ms", "probes", "probe_errors", "followers_admitted",
           "followers_refused", "followers_ended_early", "metric_mb", "client_errors", "targets", "targets_met")


def test_tiny_run_prints_every_figure():
    out = subprocess.run([sys.executable, str(SCRIPT), *TINY], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    pairs = dict(kv.split("=", 1) for kv in out.stdout.strip().splitlines()[-1].split())
    assert set(FIGURES) <= pairs.keys(), out.stdout
    figures = {k: float(v) for k, v in pairs.items()}
    assert figures["followers_admitted"] == 10 and figures["followers_ended_early"] == 0, out.stdout
    assert figures["probe_errors"] == 0 and figures["client_errors"] == 0 and figures["probes"] > 0, out.stdout
