"""Reads that must not grow with a trial's history or the number of experiments (issue 27, 9-11).

For each backend (SQLite in a temp dir; PostgreSQL in a scratch database ``bench_read_scale_<hex>``
created on --pg-url and dropped after) a fresh det-master starts, one experiment is created through
the API (random search, its one trial queued), and the database then gets, straight from SQL:

- --experiments experiments (copies of the first, states mixed: active, paused, completed,
  canceled), each with a trial; the newest --big-archives of them (what the default list page
  shows) carry a --model-kb KiB ``model_definition`` (``experiment_contexts``), the rest the first
  one's tiny one;
- --rows metric reports for trial 1 (every 100th a validation, the others training: loss,
  accuracy, lr), bulk-inserted (PostgreSQL: COPY; SQLite: executemany), and that trial's summary
  metrics as the write path would have left them (``services/metric_summaries.py``); then
  ``ANALYZE`` (PostgreSQL: ``VACUUM ANALYZE``, what autovacuum would have done by then).

The master is then restarted (so its peak memory is the reads') and, with a user token, each read
is timed --reps times after two warm-up calls (loopback; the master's time plus a local hop):

- ``describe``: ``GET /api/v1/trials/1`` (``det trial describe``, the SDK; carries summaryMetrics);
- ``list``: ``GET /api/v1/experiments?limit=50&orderBy=ORDER_BY_DESC`` (50 rows with progress);
- ``metrics``: ``GET /api/v1/trials/1/metrics?limit=100`` (a trial metrics page, its total);
- ``ui_experiment``: ``GET /experiments/1``; ``ui_trial``: ``GET /trials/1``; ``ui_list``: ``GET /experiments``;
- ``info``: ``GET /info``;
- ``list_busy``: the list again while another client calls ``describe`` in a loop.

Prints p50/p99 per read, the master's peak and current RSS, MET/MISS against the targets (p99 under
150 ms), and ends with one key=value line. With ``--compare FILE`` (an earlier run's output, e.g. at
1,000 experiments / 100 k rows) it also prints each timed read's p99 growth over that run's and
MET/MISS against ``MAX_GROWTH`` (1.5x), and the key=value line gains ``worst_growth``.

    .venv/bin/python benchmarks/read_scale.py                                     # quick: 1,000 / 100 k, SQLite
    .venv/bin/python benchmarks/read_scale.py --experiments 10000 --rows 5000000 --db both
    .venv/bin/python benchmarks/read_scale.py --experiments 200 --rows 20000 --reps 10 --db both  # smoke, ~1 min
    .venv/bin/python benchmarks/read_scale.py --db both --reps 200 > small.txt
    .venv/bin/python benchmarks/read_scale.py --experiments 10000 --rows 5000000 --db both --reps 200 \
        --compare small.txt
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.experiment_copies import CONFIG, MODEL_DEF, copy_first_experiment, timed
from controlplane.master.db.engine import make_engine
from tests.support.cluster import MasterProcess, login

TARGET_P99_MS = 150.0
READ_TIMEOUT_S = 600  # a read this slow fails the run
MAX_GROWTH = 1.5  # p99 at scale over p99 at the --compare run's (smaller) scale
READS = {
    "describe": "/api/v1/trials/1",
    "list": "/api/v1/experiments?limit=50&orderBy=ORDER_BY_DESC",
    "metrics": "/api/v1/trials/1/metrics?limit=100",
    "ui_experiment": "/experiments/1",
    "ui_trial": "/trials/1",
    "ui_list": "/experiments",
    "info": "/info",
}
CHUNK = 50_000


def _report(s: int) -> tuple[str, int, dict[str, float]]:
    """Report ``s`` of trial 1: its group, steps and values."""
    if s % 100 == 99:
        return "validation", s + 1, {"loss": round(1.0 / (s + 2), 6), "accuracy": round(s / (s + 50), 6)}
    return "training", s + 1, {"loss": round(1.0 / (s + 1), 6), "accuracy": round(s / (s + 100), 6), "lr": 0.001}


async def seed(db_url: str, args: argparse.Namespace) -> None:
    from sqlalchemy import text

    from controlplane.master.services import metric_summaries

    engine = make_engine(db_url)
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        if args.experiments > 1:
            await copy_first_experiment(conn, dialect, args.experiments, trial_id_offset=1_000_000)
            await conn.execute(text(
                "INSERT INTO experiment_contexts (experiment_id, model_definition) SELECT e.id, c.model_definition "
                "FROM experiments AS e, experiment_contexts AS c WHERE c.experiment_id = 1 AND e.id > 1"))
        big = os.urandom(args.model_kb * 1024)
        await conn.execute(text("UPDATE experiment_contexts SET model_definition = :blob WHERE experiment_id > :first"),
                           {"blob": big, "first": max(1, args.experiments - args.big_archives)})
        if dialect == "postgresql":
            for table in ("experiments", "trials"):
                await conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                        f"(SELECT max(id) FROM {table}))"))
    summaries = {"training": metric_summaries.GroupSummary(), "validation": metric_summaries.GroupSummary()}
    at = datetime(2024, 1, 1, tzinfo=UTC)
    async with engine.begin() as conn:
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        first_id = int(await conn.scalar(text("SELECT coalesce(max(id), 0) FROM metrics")) or 0) + 1
        for start in range(0, args.rows, CHUNK):
            rows = []
            folded: dict[str, list[tuple[int, int, dict[str, float]]]] = {"training": [], "validation": []}
            for s in range(start, min(args.rows, start + CHUNK)):
                group, steps, values = _report(s)
                folded[group].append((first_id + s, steps, values))
                body = "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"
                rows.append((1, 0, group, steps, body))
            for group, reports in folded.items():
                summaries[group].add_many(reports)
            if dialect == "postgresql":
                await driver.copy_records_to_table(
                    "metrics", columns=["trial_id", "trial_run_id", "metric_group", "steps_completed", "metrics",
                                        "report_time"], records=[(*r, at) for r in rows])
            else:
                await driver.executemany(
                    "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics, "
                    "report_time) VALUES (?, ?, ?, ?, ?, '2024-01-01 00:00:00.000000')", rows)
        ids = (await conn.execute(text("SELECT min(id), max(id) FROM metrics WHERE trial_id = 1"))).one()
        assert args.rows == 0 or (ids[0], ids[1]) == (first_id, first_id + args.rows - 1), ids  # ids as folded
        await conn.execute(text("UPDATE trials SET total_batches = :n WHERE id = 1"), {"n": args.rows})
    async with make_sessions(engine)() as session, session.begin():
        await metric_summaries.store(session, {(1, g): s for g, s in summaries.items() if s.reports})
    # What autovacuum would have done by then on PostgreSQL: statistics, and the visibility map that
    # lets counts read an index alone.
    if dialect == "postgresql":
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE"))
    else:
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE"))
    await engine.dispose()


def make_sessions(engine: Any) -> Any:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    return async_sessionmaker(engine, expire_on_commit=False)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def memory_kib(pid: int) -> tuple[int, int]:
    """(peak, current) resident set of the process, KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, timeout_s: float = 180.0) -> float:
    """Waits until the master's background passes after its start (checkpoint GC looks at every
    ended experiment once) are done: two seconds in a row under 5 % of a core. The seconds waited."""
    t0 = time.monotonic()
    quiet = 0
    while time.monotonic() - t0 < timeout_s and quiet < 2:
        before = cpu_s(pid)
        time.sleep(1.0)
        quiet = quiet + 1 if cpu_s(pid) - before < 0.05 else 0
    return time.monotonic() - t0


def check_answers(s: requests.Session, base: str, args: argparse.Namespace) -> None:
    """The reads answer what they should at this scale (not only fast)."""
    trial = s.get(base + READS["describe"], timeout=600).json()["trial"]
    if args.rows:
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == args.rows - args.rows // 100, trial
    page = s.get(base + READS["metrics"], timeout=600).json()
    assert page["pagination"]["total"] == args.rows and len(page["metrics"]) == min(100, args.rows), page["pagination"]
    listed = s.get(base + READS["list"], timeout=600).json()
    assert len(listed["experiments"]) == min(50, args.experiments)
    assert listed["pagination"]["total"] == args.experiments


def run(backend: str, db_url: str, args: argparse.Namespace, figures: dict[str, float]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.data_dir or scratch
        db_url = db_url.replace("TMP", tmp)
        master = MasterProcess(Path(tmp) / "master", db_url).start()
        try:
            token = login(master.url)
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {token}"
            r = s.post(f"{master.url}/api/v1/experiments", json={"config": yaml.safe_dump(CONFIG),
                                                                 "modelDefinition": MODEL_DEF})
            r.raise_for_status()
            master.stop()
            t0 = time.perf_counter()
            asyncio.run(seed(db_url, args))
            print(f"[{backend}] seeded {args.experiments} experiments, {args.rows} reports in "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
            master.start(timeout_s=300)
            assert master.proc is not None
            print(f"[{backend}] master idle after its start passes in {wait_idle(master.proc.pid):.0f}s", flush=True)
            token = login(master.url)
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {token}"
            check_answers(s, master.url, args)
            results: dict[str, list[float]] = {}
            for name, path in READS.items():
                timed(s, master.url + path, 2, READ_TIMEOUT_S)  # warm: templates compiled, caches filled
                results[name] = timed(s, master.url + path, args.reps, READ_TIMEOUT_S)
            results["list_busy"] = _list_while_describing(master.url, token, args.reps)
            assert master.proc is not None
            peak, now = memory_kib(master.proc.pid)
        finally:
            master.stop()
    for name, values in results.items():
        p50, top = statistics.median(values), p99(values)
        met = "MET" if top < TARGET_P99_MS else "MISS"
        verdict = "" if name == "info" else f" target p99 < {TARGET_P99_MS:.0f}: {met}"
        print(f"[{backend}] {name:<13} {READS.get(name, READS['list']):<52} p50 {p50:7.1f} ms  p99 {top:7.1f} ms"
              f"{verdict}")
        figures[f"{backend}_{name}_p50_ms"] = round(p50, 1)
        figures[f"{backend}_{name}_p99_ms"] = round(top, 1)
    print(f"[{backend}] master RSS: peak {peak / 1024:.0f} MiB, now {now / 1024:.0f} MiB")
    figures[f"{backend}_rss_peak_mib"] = round(peak / 1024, 1)


def _list_while_describing(base: str, token: str, reps: int) -> list[float]:
    """The list's latency while another client calls trial describe without pause."""
    stop = threading.Event()

    def hammer() -> None:
        h = requests.Session()
        h.headers["Authorization"] = f"Bearer {token}"
        while not stop.is_set():
            h.get(base + READS["describe"], timeout=600).raise_for_status()

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        return timed(s, base + READS["list"], reps, READ_TIMEOUT_S)
    finally:
        stop.set()
        thread.join(timeout=600)


async def _pg(args: argparse.Namespace, figures: dict[str, float]) -> None:
    import asyncpg

    name = f"bench_read_scale_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        await asyncio.to_thread(run, "postgres", f"{args.pg_url.rsplit('/', 1)[0]}/{name}", args, figures)
    finally:
        if args.keep_pg:
            print(f"[postgres] kept {args.pg_url.rsplit('/', 1)[0]}/{name}")
        else:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=1_000)
    ap.add_argument("--rows", type=int, default=100_000, help="metric reports of trial 1")
    ap.add_argument("--reps", type=int, default=100, help="timed calls per read")
    ap.add_argument("--model-kb", type=int, default=2048, help="model_definition size of the newest experiments")
    ap.add_argument("--big-archives", type=int, default=60, help="how many of the newest carry that archive")
    ap.add_argument("--data-dir", default=None, help="keep the master's data dir (and SQLite database) here")
    ap.add_argument("--keep-pg", action="store_true", help="leave the PostgreSQL database for a look afterwards")
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="sqlite")
    ap.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="a PostgreSQL database to connect to for CREATE/DROP DATABASE")
    ap.add_argument("--compare", type=Path, default=None,
                    help="an earlier run's output: print each p99's growth over its figures")
    args = ap.parse_args()
    baseline = _figures_of(args.compare.read_text()) if args.compare else None
    figures: dict[str, float] = {"experiments": args.experiments, "rows": args.rows}
    if args.db in ("sqlite", "both"):
        run("sqlite", "sqlite:///TMP/master.db", args, figures)
    if args.db in ("postgres", "both"):
        asyncio.run(_pg(args, figures))
    if baseline is not None:
        figures["worst_growth"] = _growth(figures, baseline)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


def _figures_of(output: str) -> dict[str, float]:
    """The figures of a run's closing key=value line."""
    lines = [line for line in output.splitlines() if line.startswith("experiments=")]
    if not lines:
        raise SystemExit("--compare: no closing 'experiments=... ' line in that file")
    return {k: float(v) for k, v in (pair.split("=", 1) for pair in lines[-1].split())}


def _growth(figures: dict[str, float], baseline: dict[str, float]) -> float:
    """Prints each targeted read's p99 over the baseline's; returns the largest ratio."""
    print(f"p99 growth over {baseline['experiments']:.0f} experiments / {baseline['rows']:.0f} rows "
          f"(target at most {MAX_GROWTH}x):")
    worst = 0.0
    for key, value in figures.items():
        if not key.endswith("_p99_ms") or key.endswith("_info_p99_ms") or not baseline.get(key):
            continue
        ratio = value / baseline[key]
        worst = max(worst, ratio)
        print(f"  {key.removesuffix('_p99_ms'):<24} {baseline[key]:7.1f} -> {value:7.1f} ms  {ratio:4.2f}x "
              f"{'MET' if ratio <= MAX_GROWTH else 'MISS'}")
    return round(worst, 2)


if __name__ == "__main__":
    main()
