"""Metric rows ingested per second through the REST API, and single-report latency.

Starts a real det-master (SQLite in a temp dir, then PostgreSQL at 127.0.0.1:5432 unless
--sqlite-only; a scratch database ``det_bench_<hex>``, dropped after), creates an experiment, and
posts metric batches to one trial from one client.

    .venv/bin/python benchmarks/metric_ingest.py [--rows 200000] [--batch 1000] [--singles 300]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.cluster import MasterProcess, login

CONFIG = {"name": "bench", "entrypoint": "true", "hyperparameters": {},
          "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}


def _pg_database() -> tuple[str, Callable[[], None]]:
    """A scratch database's URL, and what drops it."""
    import asyncpg

    name = f"det_bench_{uuid.uuid4().hex[:8]}"

    async def do(sql: str) -> None:
        conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/test")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(do(f'CREATE DATABASE "{name}"'))
    return (f"postgresql://postgres@127.0.0.1:5432/{name}",
            lambda: asyncio.run(do(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')))


def run(backend: str, db_url: str, rows: int, batch: int, singles: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp), db_url).start()
        try:
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {login(master.url)}"
            body = {"config": yaml.safe_dump(CONFIG),
                    "modelDefinition": [{"path": "x", "type": 48, "content": base64.b64encode(b"x").decode()}]}
            exp = s.post(f"{master.url}/api/v1/experiments", json=body).json()["experiment"]
            tid = exp["trialIds"][0]
            url = f"{master.url}/api/v1/trials/{tid}/metrics/batch"
            step = 0
            start = time.perf_counter()
            while step < rows:
                reports = [{"group": "training", "stepsCompleted": step + i, "trialRunId": 1,
                            "metrics": {"avgMetrics": {"loss": 1.0 / (step + i + 1), "lr": 0.01}}}
                           for i in range(min(batch, rows - step))]
                r = s.post(url, json={"reports": reports})
                r.raise_for_status()
                step += len(reports)
            elapsed = time.perf_counter() - start
            single_url = f"{master.url}/api/v1/trials/{tid}/metrics"
            latencies = []
            for i in range(singles):
                t0 = time.perf_counter()
                r = s.post(single_url, json={"group": "validation", "metrics": {
                    "stepsCompleted": i, "trialRunId": 1, "metrics": {"avgMetrics": {"loss": 0.5}}}})
                r.raise_for_status()
                latencies.append((time.perf_counter() - t0) * 1000)
        finally:
            master.stop()
    figures = {f"{backend}_rows_per_s": rows / elapsed, f"{backend}_single_ms_median": statistics.median(latencies),
               f"{backend}_single_ms_p95": sorted(latencies)[int(0.95 * len(latencies)) - 1]}
    print(f"{backend}: {rows} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s (batches of {batch}); "
          f"single report median {figures[f'{backend}_single_ms_median']:.2f} ms, "
          f"p95 {figures[f'{backend}_single_ms_p95']:.2f} ms", flush=True)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--singles", type=int, default=300)
    p.add_argument("--sqlite-only", action="store_true")
    args = p.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        figures.update(run("sqlite", f"sqlite:///{tmp}/bench.db", args.rows, args.batch, args.singles))
    if not args.sqlite_only:
        url, drop = _pg_database()
        try:
            figures.update(run("postgres", url, args.rows, args.batch, args.singles))
        finally:
            drop()
    print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
