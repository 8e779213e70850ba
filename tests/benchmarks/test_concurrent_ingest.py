"""benchmarks/concurrent_ingest.py runs end to end on a tiny load (SQLite, 2 trials, 1 s, a 2,000-row
paged read, a small config): it completes, stores every batch it was acknowledged for with no
error, and its last line carries every figure. Only that it runs; the figures are for the note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "concurrent_ingest.py"
TINY = ("--backends", "sqlite", "--trials", "2", "--duration", "1", "--warmup", "0.5", "--big-rows", "2000",
        "--config-mb", "0.05", "--client-procs", "1", "--listers", "1")
PER_RUN = ("rows_per_s", "ack_p50_ms", "ack_p99_ms", "list_p50_ms", "list_p99_ms", "rss_mb",
           "master_cpu_ms_per_batch", "rows_per_master_cpu_s", "errors")
INFO = ("info_p50_ms", "info_p99_ms", "bigread_rows_per_s", "bigread_page_p99_ms", "config_create_s", "info_errors")


def test_tiny_run_prints_every_figure():
    out = subprocess.run([sys.executable, str(SCRIPT), *TINY], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    last = out.stdout.strip().splitlines()[-1]
    pairs = dict(kv.split("=", 1) for kv in last.split())
    expected = {f"sqlite_n2_{k}" for k in PER_RUN} | {f"sqlite_{k}" for k in INFO} | {"targets", "targets_met"}
    assert expected <= pairs.keys(), last
    figures = {k: float(v) for k, v in pairs.items()}
    assert figures["sqlite_n2_errors"] == 0 and figures["sqlite_info_errors"] == 0, out.stdout
    assert figures["sqlite_n2_rows_per_s"] > 0
    assert figures["sqlite_bigread_rows_per_s"] > 0


def test_help():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--trials" in out.stdout and "--paced-rows-per-s" in out.stdout
