"""Hollow agents (as Kubernetes' kubemark): how one master holds N agents x S slots of one-slot trials.

One asyncio process holds N websocket agents that speak ``controlplane/wire/agent_protocol.py`` as
the real agent does (``benchmarks/hollow/fleet.py``: register with S slots, ping, ``StartTask`` ->
``TaskStarted`` at once, then after the trial's length a few metric rows through
``POST /api/v1/trials/{id}/metrics/batch`` with the allocation token and ``TaskExited(0)``; a kill
ends a task at once), with no processes behind them. Per size it:

1. starts a det-master on a fresh database (``--db sqlite``: a file in a temp dir; ``--db postgres``:
   a scratch database on 127.0.0.1:5432, dropped after), or uses ``--master URL``;
2. registers the agents, then creates random searches of one-slot trials (``--per-experiment``
   concurrent trials each) until their concurrency equals the slots; the trials hold their slots;
3. waits until the master has recorded every slot's trial as started ("all RUNNING");
4. churns for ``--churn-s``: each trial ends ``--trial-s`` after it started (the ones running at the
   churn's start after a uniform share of it, so exits are even) and the searchers start new ones;
5. meanwhile one prober reads the experiment list, agent list, job queue and a trial describe at
   ``--probe-rate`` calls a second;
6. kills the experiments and waits for every task to end.

Figures (latencies of the churn unless said):
- ``start_p50_s``/``start_p99_s``: trial create -> RUNNING of the trials created during the churn,
  from the master's database (``trials.start_time`` -> the first ``allocations.started_at``, both
  the master's clock); ``fill_start_*`` of the trials that filled the cluster;
  ``churn_never_started``: trials created during the churn that never ran (the percentiles leave
  them out). With ``--master URL`` these need ``--db-url``, else they are not measured;
- ``running_reached_s``: first experiment create -> the master's database counts every slot running;
- ``api_p99_ms_<endpoint>``: the prober's; ``metrics_p99_ms``: the hollow tasks' metric posts;
- ``sched_gap_*``: the master does not expose its tick time, so it is measured from outside: the
  interval between bursts of ``StartTask`` (arrivals 50 ms apart or more start a new burst) during the
  churn, while freed slots always have trials waiting. It is an upper bound of the tick period +
  pass time;
- ``master_cpu_pct`` (of one core, the master and its child processes, during the churn),
  ``master_rss_mb`` (at the end) and ``master_rss_peak_mb``; ``hollow_cpu_pct``: this process's;
- ``lost_agents``: hollow agents the master does not list as connected at the end; ``reconnects``,
  ``ws_errors``; ``http_5xx`` over the prober's reads, the creates and the metric posts.

Several sizes in one run (``--agents 10,100``) print a table; each size ends with its own
``agents=...`` key=value line (the last line is the last size's). ``--compare OLD.txt`` prints each
figure's growth over the run in that file of the same size (else its last size), as
``benchmarks/read_scale.py --compare`` does.

    .venv/bin/python benchmarks/hollow_agents.py --db postgres --agents 10,100 --slots 8 --churn-s 60
    .venv/bin/python benchmarks/hollow_agents.py --db sqlite --agents 100 --churn-s 60 > small.txt
    .venv/bin/python benchmarks/hollow_agents.py --db postgres --agents 1000 --churn-s 300 --trial-s 300 \\
        --compare small.txt
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.hollow import records
from benchmarks.hollow.figures import Recorder, cpu_s, last_figures, pct, print_growth, rss_mb
from benchmarks.hollow.fleet import Fleet
from benchmarks.hollow.prober import ENDPOINTS, probe
from benchmarks.hollow.report import report, table
from controlplane.master.db.engine import make_engine

MAX_BATCHES = 100  # the searcher's max_length; the hollow task's last rows reach it
MAX_EXPERIMENT_TRIALS = 2000  # the master's default max_experiment_trials
BURST_GAP_S = 0.05


@dataclass
class Target:
    url: str
    join_token: str
    pid: int | None
    db_url: str | None


def _config(concurrent: int, max_trials: int) -> dict[str, object]:
    return {"name": "hollow", "entrypoint": "python3 train.py",
            "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
            "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": max_trials,
                         "max_concurrent_trials": concurrent, "max_length": {"batches": MAX_BATCHES}},
            "max_restarts": 0}


MODEL_DEF = [{"path": "train.py", "type": 48, "content": "cHJpbnQoJ2hpJykK", "mtime": "0", "uid": 0, "gid": 0,
              "mode": 0o644}]


async def _login(client: httpx.AsyncClient, args: argparse.Namespace) -> str:
    r = await client.post("/api/v1/auth/login", json={"username": args.user, "password": args.password})
    r.raise_for_status()
    return str(r.json()["token"])


async def _until(what: str, check: object, timeout_s: float, interval_s: float = 0.5) -> float | None:
    """Seconds until ``await check()`` is true, or None past the deadline (said on stdout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if await check():  # type: ignore[operator]
            return time.monotonic() - t0
        await asyncio.sleep(interval_s)
    print(f"  !! {what}: not within {timeout_s:.0f}s", flush=True)
    return None


def _bursts(arrivals: list[float], since: float, until: float) -> list[float]:
    """Intervals between the starts of StartTask bursts in [since, until]."""
    starts: list[float] = []
    last = -math.inf
    for t in sorted(a for a in arrivals if since <= a <= until):
        if t - last >= BURST_GAP_S:
            starts.append(t)
        last = t
    return [b - a for a, b in zip(starts, starts[1:], strict=False)]


async def _kill_all(client: httpx.AsyncClient, exp_ids: list[int], rec: Recorder, deadline: float) -> None:
    """Kills every experiment, again after a refusal (409) until ``deadline``: the master refuses a
    kill while a trial is QUEUED with its StartTask sent (its state cannot become STOPPING_KILLED),
    which the held churn soon ends. Refusals are counted as ``kill_refused``, not as 4xx."""
    left = list(exp_ids)
    while left and time.monotonic() < deadline:
        for exp_id in list(left):
            r = await client.post(f"/api/v1/experiments/{exp_id}/kill")
            if r.status_code == 409:
                rec.count("kill_refused")
                continue
            rec.count(f"http_{r.status_code // 100}xx")
            if r.status_code >= 400:
                print(f"  !! kill of experiment {exp_id}: {r.status_code} {r.text[:300]}", flush=True)
            left.remove(exp_id)
        if left:
            await asyncio.sleep(1.0)
    if left:
        print(f"  !! experiments {left} refused their kill until the deadline", flush=True)


async def run_size(args: argparse.Namespace, n_agents: int, target: Target) -> dict[str, float]:
    slots = n_agents * args.slots
    rec = Recorder()
    fig: dict[str, float] = {"agents": n_agents, "slots_per_agent": args.slots, "slots": slots,
                             "trial_s": args.trial_s, "churn_s": args.churn_s}
    engine = make_engine(target.db_url) if target.db_url else None
    fleet = Fleet(target.url, target.join_token, trial_s=args.trial_s, metric_rows=args.metric_rows,
                  max_batches=MAX_BATCHES, rec=rec)
    stop_probe = asyncio.Event()
    phase = ["fill"]
    client = httpx.AsyncClient(base_url=target.url, timeout=300.0)
    try:
        token = await _login(client, args)
        client.headers["Authorization"] = f"Bearer {token}"
        hollow0 = time.process_time()
        for i in range(n_agents):
            fleet.add(f"hollow-{i:05d}", args.slots, i).start()

        async def all_registered() -> bool:
            return fleet.registered() == n_agents

        reg = await _until("every agent registered", all_registered, args.register_timeout)
        fig["register_s"] = round(reg, 2) if reg is not None else math.nan
        print(f"  {n_agents} agents registered in {fig['register_s']}s", flush=True)
        prober = asyncio.create_task(probe(target.url, token, args.probe_rate, fleet.trial_ids, rec, phase, stop_probe))

        # Fill: experiments until their concurrency covers every slot; trials hold their slots.
        t_fill = time.monotonic()
        exp_ids = []
        per_trials = min(MAX_EXPERIMENT_TRIALS, args.per_experiment * (3 + math.ceil(
            (args.fill_timeout + args.churn_s) / max(args.trial_s, 1.0))))
        left = slots
        while left > 0:
            concurrent = min(args.per_experiment, left)
            left -= concurrent
            config = yaml.safe_dump(_config(concurrent, max(per_trials, concurrent)))
            body = {"config": config, "modelDefinition": MODEL_DEF}
            c0 = time.monotonic()
            r = await client.post("/api/v1/experiments", json=body)
            rec.time("create_post", time.monotonic() - c0)
            rec.count(f"http_{r.status_code // 100}xx")
            r.raise_for_status()
            exp_ids.append(r.json()["experiment"]["id"])

        async def all_running() -> bool:
            if len(fleet.running) < slots:
                return False
            return engine is None or await records.running_count(engine) >= slots

        reached = await _until("every slot RUNNING", all_running, args.fill_timeout)
        fig["running_reached_s"] = round(time.monotonic() - t_fill, 2) if reached is not None else math.nan
        fig["running_at_fill_end"] = len(fleet.running)
        print(f"  {len(exp_ids)} experiments; all {slots} slots RUNNING after {fig['running_reached_s']}s "
              f"({len(fleet.running)} running on the hollow side)", flush=True)

        # Churn.
        phase[0] = "churn"
        exits0 = rec.counts["exits"]
        master0 = cpu_s(target.pid) if target.pid else 0.0
        hollow_c0, churn_wall0, churn0 = time.process_time(), time.time(), time.monotonic()
        fleet.begin_churn()
        busy_min = slots
        peak_rss = 0.0
        while time.monotonic() - churn0 < args.churn_s:
            await asyncio.sleep(1.0)
            busy_min = min(busy_min, len(fleet.running))
            if target.pid:
                peak_rss = max(peak_rss, rss_mb(target.pid)[0])
        churn1, churn_wall1 = time.monotonic(), time.time()
        elapsed = churn1 - churn0
        fig["exits_per_s"] = round((rec.counts["exits"] - exits0) / elapsed, 1)
        fig["busy_min"] = busy_min
        if target.pid:
            fig["master_cpu_pct"] = round(100 * (cpu_s(target.pid) - master0) / elapsed, 1)
            now, hwm = rss_mb(target.pid)
            fig["master_rss_mb"], fig["master_rss_peak_mb"] = round(now, 1), round(max(hwm, peak_rss), 1)
        fig["hollow_cpu_pct"] = round(100 * (time.process_time() - hollow_c0) / elapsed, 1)
        fig["hollow_cpu_total_s"] = round(time.process_time() - hollow0, 1)
        stop_probe.set()
        await prober

        # Who the master still holds; then end the work.
        r = await client.get("/api/v1/agents", params={"all": "true", "limit": 0})
        connected = {a["id"] for a in r.json()["agents"] if a["connected"]}
        fig["lost_agents"] = sum(a.agent_id not in connected for a in fleet.agents)
        fig["reconnects"] = sum(max(0, a.sessions - 1) for a in fleet.agents)
        d0 = time.monotonic()
        fleet.end_churn()
        await _kill_all(client, exp_ids, rec, d0 + args.drain_timeout)

        async def drained() -> bool:
            return not fleet.running

        left_s = max(1.0, d0 + args.drain_timeout - time.monotonic())
        done = await _until("every task ended after the kills", drained, left_s)
        fig["drain_s"] = round(time.monotonic() - d0, 2) if done is not None else math.nan

        # Start latencies, from what the master recorded.
        if engine is not None:
            lat = await records.start_latencies(engine)
            fill = [s for created, s in lat if created < churn_wall0]
            churn = [s for created, s in lat if churn_wall0 <= created <= churn_wall1]
            fig["fill_start_p50_s"], fig["fill_start_p99_s"] = round(pct(fill, .5), 2), round(pct(fill, .99), 2)
            fig["start_p50_s"], fig["start_p99_s"] = round(pct(churn, .5), 2), round(pct(churn, .99), 2)
            fig["churn_starts"] = len(churn)
            # Trials created during the churn that never ran (killed while queued at the end): the
            # start percentiles leave them out, so a master that falls behind shows here.
            created = await records.created_times(engine)
            fig["churn_never_started"] = sum(churn_wall0 <= c <= churn_wall1 for c in created) - len(churn)
        gaps = _bursts(fleet.start_arrivals, churn0, churn1)
        fig["sched_gap_p50_s"], fig["sched_gap_p99_s"] = round(pct(gaps, .5), 2), round(pct(gaps, .99), 2)
        create = rec.latencies["create_post"]
        fig["create_p50_s"], fig["create_p99_s"] = round(pct(create, .5), 3), round(pct(create, .99), 3)
        for name in ENDPOINTS:
            fig[f"api_p99_ms_{name}"] = round(1000 * pct(rec.latencies[f"api:churn:{name}"], .99), 1)
            fig[f"fill_api_p99_ms_{name}"] = round(1000 * pct(rec.latencies[f"api:fill:{name}"], .99), 1)
        fig["probes"] = sum(len(v) for k, v in rec.latencies.items() if k.startswith("api:"))
        metrics = rec.latencies["metrics_post"]
        fig["metrics_posts"] = len(metrics)
        fig["metrics_p50_ms"] = round(1000 * pct(metrics, .5), 1)
        fig["metrics_p99_ms"] = round(1000 * pct(metrics, .99), 1)
        for key in ("http_5xx", "http_4xx", "ws_errors", "api_errors", "metrics_errors", "metrics_retries", "kills",
                    "kill_refused", "late_pongs"):
            fig[key] = rec.counts.get(key, 0)
        odd = {k: v for k, v in rec.counts.items() if ":" in k or "status" in k}
        if odd:
            print(f"  errors by kind: {odd}", flush=True)
    finally:
        stop_probe.set()
        await fleet.close()
        await client.aclose()
        if engine is not None:
            await engine.dispose()
    return fig


def _one(args: argparse.Namespace, n_agents: int) -> dict[str, float]:
    from tests.support.cluster import MasterProcess
    from tests.support.databases import empty_database

    print(f"[{args.db}] {n_agents} agents x {args.slots} slots, trials of {args.trial_s}s, churn {args.churn_s}s; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    if args.master:
        token = Path(args.join_token_file).read_text().strip()
        return asyncio.run(run_size(args, n_agents, Target(args.master, token, args.master_pid, args.db_url)))
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        db_url = stack.enter_context(empty_database(args.db, Path(tmp) / "db"))
        master = MasterProcess(Path(tmp) / "master", db_url).start()
        try:
            assert master.proc is not None
            return asyncio.run(run_size(args, n_agents, Target(master.url, master.join_token, master.proc.pid, db_url)))
        except BaseException:
            print(master.log_tail(), file=sys.stderr)
            raise
        finally:
            master.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="10", help="sizes, comma-separated: each runs on a fresh master")
    ap.add_argument("--slots", type=int, default=8, help="slots per agent")
    ap.add_argument("--trial-s", type=float, default=30.0, help="a trial's length once the churn begins")
    ap.add_argument("--churn-s", type=float, default=60.0)
    ap.add_argument("--per-experiment", type=int, default=100, help="concurrent trials of one experiment")
    ap.add_argument("--metric-rows", type=int, default=3, help="training rows a trial posts (and one validation)")
    ap.add_argument("--probe-rate", type=float, default=4.0, help="API reads a second")
    ap.add_argument("--register-timeout", type=float, default=300.0)
    ap.add_argument("--fill-timeout", type=float, default=600.0)
    ap.add_argument("--drain-timeout", type=float, default=300.0, help="for the kills at the end to end every task")
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="postgres")
    ap.add_argument("--master", default=None, help="a running master's URL instead of starting one")
    ap.add_argument("--join-token-file", default=None, help="with --master: its join token")
    ap.add_argument("--master-pid", type=int, default=None, help="with --master: its pid, for CPU and RSS")
    ap.add_argument("--db-url", default=None, help="with --master: its database, for the start latencies")
    ap.add_argument("--user", default="determined")
    ap.add_argument("--password", default="")
    ap.add_argument("--compare", type=Path, default=None, help="an earlier run's output: each figure's growth")
    args = ap.parse_args()
    if args.master and not args.join_token_file:
        ap.error("--master needs --join-token-file")
    baselines = last_figures(args.compare.read_text()) if args.compare else []
    runs = []
    for n in (int(x) for x in args.agents.split(",")):
        fig = _one(args, n)
        report(fig)
        runs.append(fig)
    if len(runs) > 1:
        table(runs)
    for fig in runs:
        if baselines:
            same = [b for b in baselines if b["agents"] == fig["agents"] and b["slots"] == fig["slots"]]
            print_growth(fig, same[-1] if same else baselines[-1])
    for fig in runs:
        print(" ".join(f"{k}={v:g}" for k, v in fig.items()), flush=True)


if __name__ == "__main__":
    main()
