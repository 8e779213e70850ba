"""benchmarks/asha.py on a tiny size: its last line carries the figures, runs are reproducible, and
aggressive adaptive ASHA (one bracket) decides exactly as Optuna's SuccessiveHalvingPruner with the
same settings: an independent implementation of the same rule, on the same trials."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "asha.py"
TINY = ("--seeds", "2", "--max-trials", "60", "--max-length", "256", "--workers", "4")
REQUIRED = {"seeds", "asha_compute", "asha_aggressive_compute", "asha_conservative_compute", "random_compute",
            "optuna_sh_compute", "optuna_hb_compute", "asha_vs_random", "asha_vs_best_optuna", "asha_vs_optuna_hb",
            "asha_aggressive_vs_random", "asha_aggressive_vs_best_optuna", "missed", "rank_rho", "targets_met",
            "targets", "wall_s"}


def run(*args: str) -> tuple[str, dict[str, float]]:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    pairs = [kv.split("=", 1) for kv in out.strip().splitlines()[-1].split()]
    assert all(len(p) == 2 for p in pairs), out
    return out, {k: float(v) for k, v in pairs}


def test_tiny_run_prints_the_figures_and_repeats_exactly():
    out, figures = run(*TINY)
    assert REQUIRED <= figures.keys()
    assert figures["seeds"] == 2 and figures["targets"] == 4
    assert all(figures[k] > 0 for k in REQUIRED if k.endswith("_compute"))
    assert figures["asha_vs_random"] == pytest.approx(figures["asha_compute"] / figures["random_compute"], abs=1e-3)
    assert "adaptive ASHA standard" in out and "Optuna" in out
    assert sum(line.startswith(("MET ", "MISS")) for line in out.splitlines()) == 4
    _, again = run(*TINY)
    assert {k: v for k, v in again.items() if k != "wall_s"} == {k: v for k, v in figures.items() if k != "wall_s"}
    # one bracket of Determined's ASHA and Optuna's successive halving stop the same trials
    assert figures["asha_aggressive_compute"] == figures["optuna_sh_compute"]
