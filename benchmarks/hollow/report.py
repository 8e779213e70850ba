"""The human part of a run's output: one size's figures in words, and a table of several sizes."""

from __future__ import annotations

import math

from benchmarks.hollow.prober import ENDPOINTS


def report(fig: dict[str, float]) -> None:
    print(f"  {fig['agents']:.0f} agents x {fig['slots_per_agent']:.0f} slots = {fig['slots']:.0f}: "
          f"all RUNNING in {fig['running_reached_s']}s; create POST p50/p99 {fig['create_p50_s']}/"
          f"{fig['create_p99_s']} s")
    if "start_p50_s" in fig:
        print(f"  trial create -> RUNNING (master's record): churn p50 {fig['start_p50_s']} s, p99 "
              f"{fig['start_p99_s']} s over {fig['churn_starts']:.0f} starts ({fig['churn_never_started']:.0f} created "
              f"then never started); fill p50 {fig['fill_start_p50_s']} s, "
              f"p99 {fig['fill_start_p99_s']} s")
    print("  API p99 during the churn (fill): " + ", ".join(
        f"{n} {fig[f'api_p99_ms_{n}']} ms ({fig[f'fill_api_p99_ms_{n}']})" for n in ENDPOINTS)
        + f"; {fig['probes']:.0f} probes")
    print(f"  metrics POST p50/p99 {fig['metrics_p50_ms']}/{fig['metrics_p99_ms']} ms over {fig['metrics_posts']:.0f}; "
          f"churn {fig['exits_per_s']} exits/s, busy slots min {fig['busy_min']:.0f}")
    print(f"  scheduling gap (StartTask bursts, from outside) p50 {fig['sched_gap_p50_s']} s, "
          f"p99 {fig['sched_gap_p99_s']} s")
    if "master_cpu_pct" in fig:
        print(f"  master CPU {fig['master_cpu_pct']} % of a core, RSS {fig['master_rss_mb']} MB "
              f"(peak {fig['master_rss_peak_mb']} MB)")
    print(f"  hollow process CPU {fig['hollow_cpu_pct']} % during the churn; lost agents {fig['lost_agents']:.0f}, "
          f"reconnects {fig['reconnects']:.0f}, 5xx {fig['http_5xx']:.0f}, websocket errors {fig['ws_errors']:.0f}, "
          f"kills {fig['kills']:.0f}, drain {fig['drain_s']} s", flush=True)


TABLE = ("slots", "running_reached_s", "start_p50_s", "start_p99_s", "api_p99_ms_experiments", "api_p99_ms_agents",
         "api_p99_ms_job_queue", "api_p99_ms_trial", "metrics_p99_ms", "sched_gap_p99_s", "master_cpu_pct",
         "master_rss_mb", "hollow_cpu_pct", "lost_agents", "http_5xx")


def table(runs: list[dict[str, float]]) -> None:
    print("agents " + " ".join(f"{c:>12.12}" for c in TABLE))
    for fig in runs:
        print(f"{fig['agents']:>6.0f} " + " ".join(f"{fig.get(c, math.nan):>12g}" for c in TABLE))
