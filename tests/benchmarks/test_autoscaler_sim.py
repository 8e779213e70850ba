"""benchmarks/autoscaler_sim.py on a tiny trace: its last line carries the required figures, the
oracle is a lower bound, the planner is not dearer than Determined's rule, capacity errors in the
first zone cost no extra wait; plus the oracle, Determined's rule and when each rule runs (the
planner woken by new unplaceable demand at most once a second, Determined every 5 s) on hand-made
cases."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.autoscaler_sim.cluster import Cluster
from benchmarks.autoscaler_sim.policies import MIN_TICK_GAP_S, DeterminedRule, PlannerPolicy
from benchmarks.autoscaler_sim.workload import Job, oracle
from controlplane.autoscaler import PoolScaling

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "autoscaler_sim.py"
SMALL = ("--jobs", "150", "--seed", "3", "--tick-repeat", "1", "--tick-gangs", "500")
REQUIRED = {"jobs", "oracle_ratio", "determined_ratio", "p95_wait_s", "median_wait_s", "determined_p95_wait_s",
            "determined_defaults_ratio", "determined_defaults_p95_wait_s", "determined_defaults_median_wait_s",
            "fault_p95_wait_s", "fault_median_wait_s", "tick_ms", "targets_met", "targets"}


def run_sim(*args: str) -> tuple[str, dict[str, float]]:
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    pairs = [kv.split("=", 1) for kv in out.strip().splitlines()[-1].split()]
    assert all(len(p) == 2 for p in pairs), out
    return out, {k: float(v) for k, v in pairs}


@pytest.fixture(scope="module")
def small_run() -> tuple[str, dict[str, float]]:
    return run_sim(*SMALL)


@pytest.fixture(scope="module")
def small(small_run) -> dict[str, float]:
    return small_run[1]


def test_last_line_holds_the_required_figures(small):
    assert REQUIRED <= small.keys()
    assert small["jobs"] == 150
    assert small["tick_ms"] > 0


def test_output_states_the_wake_rule_and_checks_both_determined_rows(small_run):
    out, figures = small_run
    assert "as soon as a scheduler pass leaves a job unplaced" in out
    assert "never sooner than 1 s after its previous run" in out
    assert "Determined's provisioner runs every 5 s only" in out
    checks = [line for line in out.splitlines() if line.startswith(("MET ", "MISS"))]
    assert any("the Determined rule (same config)" in line for line in checks)
    assert any("Determined with its defaults" in line for line in checks)
    assert figures["targets"] == len(checks) == 5
    assert figures["targets_met"] == sum(line.startswith("MET ") for line in checks)


def test_oracle_is_a_lower_bound_for_every_policy(small):
    assert small["oracle_ratio"] >= 1.0
    assert small["determined_ratio"] >= 1.0
    assert small["determined_defaults_ratio"] >= 1.0


def test_planner_is_not_dearer_than_determined(small):
    assert small["oracle_ratio"] < small["determined_defaults_ratio"]  # Determined's 20 min idle default
    # with the same config the rules differ in one case only (see the last test), so which is cheaper
    # on a whole trace is within noise and flips with the seed; a real regression shows as more than 2%
    assert small["oracle_ratio"] <= small["determined_ratio"] * 1.02


def test_the_wake_up_bounds_the_wait_by_the_boot(small):
    # an unplaceable job is planned for within a second, so p95 is one boot (60 s) plus at most that second,
    # below Determined's, which waits for its next 5 s tick
    assert small["p95_wait_s"] <= 60.0 + MIN_TICK_GAP_S
    assert small["p95_wait_s"] < small["determined_p95_wait_s"]


def test_no_capacity_in_the_first_zone_adds_no_wait_beyond_one_tick(small):
    assert small["fault_capacity_errors"] > 0
    assert small["fault_p95_wait_s"] - small["p95_wait_s"] <= 5.0
    assert small["fault_median_wait_s"] - small["median_wait_s"] <= 5.0


def test_same_seed_same_figures_and_help(small):
    _, again = run_sim(*SMALL)
    assert {k: v for k, v in again.items() if k != "tick_ms"} == {k: v for k, v in small.items() if k != "tick_ms"}
    helptext = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                              check=True).stdout
    assert "--jobs" in helptext and "--seed" in helptext


def test_oracle_counts_work_and_only_starts_a_boot_cannot_bridge():
    jobs = [Job(0, 0.0, 8, 100.0), Job(1, 50.0, 4, 100.0), Job(2, 1000.0, 8, 10.0)]
    o = oracle(jobs, 8, 60.0)
    assert o.work_s == (800 + 400 + 80) / 8
    assert o.starts == 3  # level 1 at 0, level 2 at 50, level 1 again after a 850 s gap
    bridged = oracle([Job(0, 0.0, 8, 100.0), Job(1, 130.0, 8, 100.0)], 8, 60.0)
    assert bridged.starts == 1  # a 30 s dip: kept, not restarted


def test_determined_sums_slots_and_ignores_gangs_that_never_fit():
    rule = DeterminedRule(8, 0, 10, 120.0, 600.0, "z")
    assert rule.desired_new_instances([16, 4, 4, 1]) == 4  # ceil(25 / 8)
    assert rule.desired_new_instances([12, 3]) == 1  # 12 can never fit 8-slot agents


def test_a_wide_gang_uses_an_idle_agent_under_the_planner_but_not_under_determined():
    # an 8-GPU job runs 66-166 s; a 16-GPU gang arrives at 168 s while that agent idles
    trace = [Job(0, 1.0, 8, 100.0), Job(1, 168.0, 16, 100.0)]
    cfg = PoolScaling(pool="gpu", instance_types=("p4d",), zones=("a",), slots_per_instance=8, max_instances=10,
                      max_idle_agent_period_s=120.0)
    ours = Cluster(trace, 8, 60.0, 5.0).run(PlannerPolicy(cfg, wake_gap_s=None))  # same timing as Determined
    det = Cluster(trace, 8, 60.0, 5.0).run(DeterminedRule(8, 0, 10, 120.0, 600.0, "a"))
    assert (ours.starts, det.starts) == (2, 3)
    assert ours.instance_s < det.instance_s
    assert ours.waits == det.waits
    woken = Cluster(trace, 8, 60.0, 5.0).run(PlannerPolicy(cfg))  # as the master runs it: the same packing, sooner
    assert woken.starts == 2
    assert woken.waits == pytest.approx([60.0, 60.0])


def test_min_tick_gap_is_the_services():
    from controlplane.master.autoscaling import service

    assert MIN_TICK_GAP_S == service.MIN_TICK_GAP_S


CFG8 = PoolScaling(pool="gpu", instance_types=("p4d",), zones=("a",), slots_per_instance=8, max_instances=10,
                   max_idle_agent_period_s=120.0)


@dataclass
class Recording(PlannerPolicy):
    runs_at: list[float] = field(default_factory=list)

    def tick(self, now: float, cluster: Cluster) -> None:
        self.runs_at.append(now)
        super().tick(now, cluster)


def test_new_unplaceable_demand_wakes_the_planner_at_most_once_a_second():
    # ticks at 0; a job at 2.3 wakes it at once; one at 2.8 falls inside the 1 s gap and runs at 3.3;
    # each run restarts the 5 s wait; jobs placed at boot (62.3, 63.3) are not new demand and wake nothing
    trace = [Job(0, 2.3, 8, 100.0), Job(1, 2.8, 8, 100.0)]
    policy = Recording(CFG8)
    ours = Cluster(trace, 8, 60.0, 5.0).run(policy)
    assert policy.runs_at[:3] == pytest.approx([0.0, 2.3, 3.3])
    assert policy.runs_at[3:] == pytest.approx([3.3 + 5.0 * k for k in range(1, len(policy.runs_at) - 2)])
    assert ours.runs == len(policy.runs_at)
    assert ours.waits == pytest.approx([60.0, 60.5])
    det = Cluster(trace, 8, 60.0, 5.0).run(DeterminedRule(8, 0, 10, 120.0, 600.0, "a"))
    assert det.waits == pytest.approx([62.7, 62.2])  # both launched at its 5 s tick


def test_a_wake_after_the_gap_runs_at_once_and_demand_that_fits_wakes_nothing():
    # job 1 (16 GPUs) arrives at 4.0, past the gap, and the planner runs then; job 2 fits the agent job 0 half-uses
    trace = [Job(0, 2.3, 4, 500.0), Job(1, 4.0, 16, 100.0), Job(2, 100.0, 4, 50.0)]
    policy = Recording(CFG8)
    ours = Cluster(trace, 8, 60.0, 5.0).run(policy)
    assert policy.runs_at[:4] == pytest.approx([0.0, 2.3, 4.0, 9.0])
    assert all(abs((t - 4.0) / 5.0 - round((t - 4.0) / 5.0)) < 1e-6 for t in policy.runs_at[2:])
    assert ours.waits == pytest.approx([60.0, 60.0, 0.0])
    tick_only = Cluster(trace, 8, 60.0, 5.0).run(PlannerPolicy(CFG8, wake_gap_s=None))
    assert tick_only.waits == pytest.approx([62.7, 61.0, 0.0])
