"""Web UI speed: the experiment list with 10,000 experiments, a chart over a 1 M-report metric
series, and the weight of the experiment detail page with its assets.

For each backend (SQLite in a temp dir; PostgreSQL in a scratch database created on --pg-url and
dropped after) a fresh det-master is started on a free loopback port. One experiment is created
through the API; the database then copies it (and its trial) to --experiments experiments in
one INSERT ... SELECT each (states mixed: active, paused, completed, canceled), and writes
--points training reports of metric ``loss`` for one trial. Then, with a user token:

- ``GET /experiments`` (the default page of 50, the experiments' progress computed as the page
  shows it) --reps times: latency p50/p95 on loopback (the master's time plus a local hop);
- ``GET /ui/data/trials/{id}/series?metric=loss&points=2000`` over the 1 M-report series, first
  (cold) and p50 of --reps;
- the bytes of ``/experiments/{id}``, every script and stylesheet it names and its chart's data
  request (no compression: what the browser transfers on a first visit).

Prints one line per figure, MET/MISS per target, and ends with one key=value line.

    .venv/bin/python benchmarks/webui.py                          # SQLite, 10,000 experiments, 1 M points
    .venv/bin/python benchmarks/webui.py --pg-url postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python benchmarks/webui.py --experiments 500 --points 20000 --reps 5   # smoke, ~15 s
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.experiment_copies import CONFIG, MODEL_DEF, copy_first_experiment, timed
from controlplane.master.db.engine import make_engine
from tests.support.cluster import MasterProcess, login

READ_TIMEOUT_S = 120  # a read this slow fails the run
TARGETS = {"list_p50_ms": 150.0, "chart_p50_ms": 200.0, "detail_kb": 300.0}


async def seed(db_url: str, experiments: int, points: int) -> None:
    """Copies experiment 1 and its trial to ids 2..experiments, then ``points`` reports for trial 1."""
    from sqlalchemy import text

    engine = make_engine(db_url)
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        await copy_first_experiment(conn, dialect, experiments, trial_id_offset=1000)
        if dialect == "postgresql":
            await conn.execute(text("SELECT setval(pg_get_serial_sequence('experiments', 'id'), :count)"),
                               {"count": experiments})
    chunk = 50_000
    metrics = '{"loss": %s, "accuracy": 0.75}'
    when = "2024-01-01 00:00:00"
    async with engine.begin() as conn:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        for start in range(0, points, chunk):
            rows = [(1, 0, "training", s, metrics % (1.0 / (s + 1)), when)
                    for s in range(start, min(points, start + chunk))]
            if dialect == "postgresql":
                from datetime import UTC, datetime

                at = datetime(2024, 1, 1, tzinfo=UTC)
                await driver.copy_records_to_table(  # type: ignore[union-attr]
                    "metrics", columns=["trial_id", "trial_run_id", "metric_group", "steps_completed", "metrics",
                                        "report_time"], records=[(*r[:5], at) for r in rows])
            else:
                await driver.executemany(  # type: ignore[union-attr]
                    "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics, "
                    "report_time) VALUES (?, ?, ?, ?, ?, ?)", rows)
        await conn.execute(text("ANALYZE"))
    await engine.dispose()


def page_weight(session: requests.Session, base: str, path: str) -> tuple[int, list[str]]:
    """Bytes of the page, of each script and stylesheet it names, and of its chart's data request."""
    html = session.get(base + path, timeout=60)
    html.raise_for_status()
    total, parts = len(html.content), [f"page={len(html.content)}"]
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+\.(?:js|css))"', html.text):
        body = session.get(base + asset, timeout=60).content
        total += len(body)
        parts.append(f"{asset.rsplit('/', 1)[1]}={len(body)}")
    chart = re.search(r'data-series-url="([^"]+)"', html.text)
    if chart:
        query = "?group=training&metric=loss&x=batches&points=2000"
        body = session.get(f"{base}{chart.group(1)}{query}", timeout=60).content
        total += len(body)
        parts.append(f"series={len(body)}")
    return total, parts


def run(backend: str, db_url: str, args: argparse.Namespace, figures: dict[str, float]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db_url = db_url.replace("TMP", tmp)
        master = MasterProcess(Path(tmp) / "master", db_url).start()
        try:
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {login(master.url)}"
            r = s.post(f"{master.url}/api/v1/experiments", json={"config": yaml.safe_dump(CONFIG),
                                                                 "modelDefinition": MODEL_DEF})
            r.raise_for_status()
            t0 = time.perf_counter()
            asyncio.run(seed(db_url, args.experiments, args.points))
            print(f"[{backend}] seeded {args.experiments} experiments, {args.points} reports in "
                  f"{time.perf_counter() - t0:.1f}s")
            timed(s, f"{master.url}/experiments", 2, READ_TIMEOUT_S)  # warm: templates compiled, caches filled
            lst = timed(s, f"{master.url}/experiments", args.reps, READ_TIMEOUT_S)
            chart_url = f"{master.url}/ui/data/trials/1/series?metric=loss&points=2000"
            cold = timed(s, chart_url, 1, READ_TIMEOUT_S)[0]
            chart = timed(s, chart_url, args.reps, READ_TIMEOUT_S)
            points = len(s.get(chart_url, timeout=60).json()["series"][0]["x"])
            weight, parts = page_weight(s, master.url, "/experiments/1")
        finally:
            master.stop()
    p = {"list_p50_ms": statistics.median(lst), "chart_p50_ms": statistics.median(chart), "detail_kb": weight / 1024}
    print(f"[{backend}] /experiments of {args.experiments}: p50 {p['list_p50_ms']:.1f} ms, "
          f"p95 {sorted(lst)[int(0.95 * (len(lst) - 1))]:.1f} ms")
    print(f"[{backend}] chart over {args.points} reports -> {points} points: cold {cold:.1f} ms, "
          f"p50 {p['chart_p50_ms']:.1f} ms")
    print(f"[{backend}] /experiments/1 with assets: {p['detail_kb']:.1f} KB ({', '.join(parts)})")
    for key, value in p.items():
        print(f"[{backend}] {key} {value:.1f} target < {TARGETS[key]:.0f}: {'MET' if value < TARGETS[key] else 'MISS'}")
        figures[f"{backend}_{key}"] = round(value, 1)
    figures[f"{backend}_chart_cold_ms"] = round(cold, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--pg-url", default=None, help="a PostgreSQL server's admin URL: also run there")
    args = ap.parse_args()
    figures: dict[str, float] = {}
    run("sqlite", "sqlite:///TMP/master.db", args, figures)
    if args.pg_url:
        asyncio.run(_pg(args, figures))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


async def _pg(args: argparse.Namespace, figures: dict[str, float]) -> None:
    import asyncpg

    name = f"det_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(args.pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        await asyncio.to_thread(run, "postgres", f"{args.pg_url.rsplit('/', 1)[0]}/{name}", args, figures)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    main()
