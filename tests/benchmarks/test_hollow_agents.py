"""benchmarks/hollow_agents.py end to end on a small cluster: 50 hollow agents x 2 slots on a real
master (SQLite), filled with one-slot trials, then a short churn of trials ending and starting. A user
would notice an agent dropped, a 5xx, a slot that never ran or metric rows refused; those are asserted.
Timings are not: they are the benchmark's figures (speed targets live in benchmarks/, not in tests)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.hollow.figures import last_figures, print_growth

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hollow_agents.py"
SMALL = ("--db", "sqlite", "--agents", "50", "--slots", "2", "--trial-s", "2", "--churn-s", "6", "--probe-rate", "8",
         "--fill-timeout", "90", "--drain-timeout", "60", "--register-timeout", "60")
BASELINE = "agents=50 slots_per_agent=2 slots=100 start_p99_s=0.5 api_p99_ms_agents=10 lost_agents=0\n"


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_fifty_agents_fill_and_churn_without_loss(tmp_path):
    old = tmp_path / "old.txt"
    old.write_text("an earlier run\n" + BASELINE)
    out = subprocess.run([sys.executable, str(SCRIPT), *SMALL, "--compare", str(old)],
                         capture_output=True, text=True, timeout=270)  # ~40 s on a quiet 2-core box
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    fig = {k: float(v) for k, v in (kv.split("=", 1) for kv in last.split())}
    assert fig["agents"] == 50 and fig["slots"] == 100, last
    # Every slot ran a trial, as the master recorded it, and the churn started new ones.
    assert math.isfinite(fig["running_reached_s"]) and fig["running_at_fill_end"] == 100, out.stdout
    assert fig["churn_starts"] > 0 and fig["exits_per_s"] > 0, out.stdout
    # Nothing broke: no agent lost or reconnected, no 5xx, no websocket error, metric rows accepted.
    assert fig["lost_agents"] == 0 and fig["reconnects"] == 0 and fig["ws_errors"] == 0, out.stdout
    assert fig["http_5xx"] == 0 and fig["http_4xx"] == 0 and fig["api_errors"] == 0, out.stdout
    assert fig["metrics_posts"] > 0 and fig["metrics_errors"] == 0 and fig["probes"] > 0, out.stdout
    assert math.isfinite(fig["drain_s"]), out.stdout  # the kill at the end reached every task
    # --compare read the earlier run of the same size and printed each figure's growth.
    assert "growth from 50 x 2 to 50 x 2" in out.stdout, out.stdout
    assert any(line.split()[:1] == ["start_p99_s"] for line in out.stdout.splitlines()), out.stdout


def test_compare_matches_sizes_and_prints_ratios(capsys):
    smaller = BASELINE.replace("agents=50", "agents=10").replace("slots=100", "slots=20")
    runs = last_figures("noise\n" + BASELINE + smaller)
    assert [r["agents"] for r in runs] == [50, 10]
    print_growth({"agents": 500, "slots_per_agent": 2, "slots": 1000, "start_p99_s": 1.5, "api_p99_ms_agents": 5,
                  "lost_agents": 0}, runs[0])
    lines = capsys.readouterr().out.splitlines()
    assert "cluster x10.0" in lines[0]
    assert [ln.split()[-1] for ln in lines[1:]] == ["3.00x", "0.50x", "same"]


def test_compare_refuses_a_file_without_figures():
    with pytest.raises(SystemExit, match="no 'agents=... ' line"):
        last_figures("hello\n")
