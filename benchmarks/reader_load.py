"""Readers against one real master: does `/info` and a 10-row experiment list stay fast while 200
clients follow a trial's logs and 5 read its whole metric history over and over?

A fresh det-master (SQLite in a temp dir) gets a fake agent with one slot, 10 experiments (the
first one's trial runs), --log-lines log lines and --metric-rows metric rows for that trial
(written straight into the database), and --users users. Then, all at once:

- --followers clients (spread over the users, as many per user as fit under 8) `GET
  /api/v1/trials/{id}/logs?follow=true` on their own connection and read what comes (the first
  answer of each is the whole log);
- the trial keeps logging: a batch of --log-batch lines every 0.5 s over `POST /api/v1/task/logs`
  with its own session token, so followers are woken;
- --metric-readers clients read `GET /api/v1/trials/metrics/trial_metrics?trialIds=..&group=bulk`
  to the end and start again;
- a probe (its own process) calls `GET /info` and `GET /api/v1/experiments?limit=10` every 50 ms
  each for --duration seconds (after --warmup) and times them from the request written to the
  answer read.

Prints the figures and MET/MISS for the targets (p99 under 200 ms), and ends with one key=value
line. To compare with another checkout, run its copy with the same interpreter and PYTHONPATH set to
it (the master is the venv's det-master, which imports whatever PYTHONPATH puts first):

    .venv/bin/python benchmarks/reader_load.py                  # the issue's load, ~2 min
    git worktree add /tmp/before <commit> && cp benchmarks/reader_load.py /tmp/before/benchmarks/ && \
        PYTHONPATH=/tmp/before .venv/bin/python /tmp/before/benchmarks/reader_load.py
    .venv/bin/python benchmarks/reader_load.py --followers 10 --metric-readers 1 --log-lines 2000 \\
        --metric-rows 2000 --duration 2 --warmup 1 --users 2      # smoke, ~20 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import concurrent_ingest as ci
from tests.support.cluster import MasterProcess, login

TARGET_P99_MS = 200.0
PER_USER = 8  # followers per user: the master's default cap, so every follower is admitted


# ---- clients (each group in its own process) ----------------------------------------------------------


async def _request(port: int, path: str, token: str, *, method: str = "GET", body: bytes = b"",
                   extra: str = "") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    writer.write(head.encode() + body)
    await writer.drain()
    return reader, writer


async def _status(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else 0


async def _follower(port: int, path: str, token: str, out: dict[str, Any], stop: float) -> None:
    try:
        reader, writer = await _request(port, path, token)
        status = await _status(reader)
        out["status"][str(status)] = out["status"].get(str(status), 0) + 1
        while time.time() < stop:
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), timeout=max(0.1, stop - time.time()))
            except TimeoutError:
                break
            if not chunk:
                out["ended"] += 1  # the master ended a follow of a running trial: should not happen
                break
            out["bytes"] += len(chunk)
        writer.close()
    except OSError as e:
        out["errors"] += 1
        out["first_error"] = out["first_error"] or repr(e)


async def _metric_reader(port: int, path: str, token: str, out: dict[str, Any], stop: float) -> None:
    while time.time() < stop:
        try:
            reader, writer = await _request(port, path, token)
            status = await _status(reader)
            out["status"][str(status)] = out["status"].get(str(status), 0) + 1
            while time.time() < stop:
                chunk = await reader.read(1 << 20)
                if not chunk:
                    out["reads"] += 1 if status == 200 else 0
                    break
                out["bytes"] += len(chunk)
            writer.close()
            if status != 200:
                await asyncio.sleep(0.5)
        except OSError as e:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or repr(e)
            await asyncio.sleep(0.5)


async def _log_poster(port: int, token: str, batch: int, out: dict[str, Any], stop: float) -> None:
    n = 0
    while time.time() < stop:
        body = json.dumps({"logs": [{"log": f"live line {n + i}"} for i in range(batch)]}).encode()
        n += batch
        try:
            reader, writer = await _request(port, "/api/v1/task/logs", "", method="POST", body=body,
                                            extra="Content-Type: application/json\r\n"
                                                  f"Grpc-Metadata-x-allocation-token: Bearer {token}\r\n")
            status = await _status(reader)
            await reader.read()
            writer.close()
            out["posts"][str(status)] = out["posts"].get(str(status), 0) + 1
        except OSError as e:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or repr(e)
        await asyncio.sleep(0.5)


def load_main(kind: str, port: int, work: dict[str, Any], stop: float, q: Any) -> None:
    out: dict[str, Any] = {"status": {}, "posts": {}, "bytes": 0, "reads": 0, "ended": 0, "errors": 0,
                           "first_error": ""}

    async def main() -> None:
        jobs = []
        if kind == "followers":
            jobs = [_follower(port, work["path"], tok, out, stop) for tok in work["tokens"]]
        else:
            jobs = [_metric_reader(port, work["path"], tok, out, stop) for tok in work["tokens"]]
            jobs.append(_log_poster(port, work["task_token"], work["batch"], out, stop))
        await asyncio.gather(*jobs)

    asyncio.run(main())
    q.put((kind, out))


def probe_main(port: int, token: str, start: float, stop: float, q: Any) -> None:
    lat: dict[str, list[float]] = {"info": [], "list": []}
    errors: list[str] = []

    async def one(name: str, path: str) -> None:
        t0 = time.perf_counter()
        try:
            reader, writer = await _request(port, path, token)
            status = await _status(reader)
            await reader.read()
            writer.close()
        except OSError as e:
            errors.append(f"{name}: {e!r}")
            return
        if status != 200:
            errors.append(f"{name}: HTTP {status}")
        elif time.time() >= start:
            lat[name].append((time.perf_counter() - t0) * 1000)

    async def loop(name: str, path: str) -> None:
        while time.time() < stop:
            t0 = time.monotonic()
            await one(name, path)
            await asyncio.sleep(max(0.0, 0.05 - (time.monotonic() - t0)))

    async def main() -> None:
        await asyncio.gather(loop("info", "/info"), loop("list", "/api/v1/experiments?limit=10"))

    asyncio.run(main())
    q.put(("probe", {"lat": lat, "errors": errors}))


# ---- set-up -------------------------------------------------------------------------------------------


def populate_logs(db_path: str, task_id: str, trial_id: int, allocation_id: str, lines: int) -> None:
    conn = sqlite3.connect(db_path, timeout=60)
    chunk = 50_000
    for start in range(0, lines, chunk):
        with conn:
            conn.executemany(
                "INSERT INTO task_logs (task_id, trial_id, allocation_id, agent_id, rank_id, stdtype, level, "
                "source, timestamp, log) VALUES (?, ?, ?, 'bench-agent', 0, 'stdout', 'LOG_LEVEL_INFO', 'task', "
                "'2024-01-01 00:00:00.000000', ?)",
                ((task_id, trial_id, allocation_id, f"step {i}: loss 0.25 accuracy 0.75 some words of text\n")
                 for i in range(start, min(lines, start + chunk))))
    conn.close()


def make_users(url: str, admin: requests.Session, n: int) -> list[str]:
    tokens = []
    for i in range(n):
        name = f"reader{i}"
        r = admin.post(f"{url}/api/v1/users", json={"user": {"username": name, "active": True},
                                                     "password": "pw"})
        if r.status_code not in (200, 201):
            raise RuntimeError(f"creating {name}: {r.status_code} {r.text}")
        tokens.append(login(url, name, "pw"))
    return tokens


def run(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db_path = f"{tmp}/master.db"
        master = MasterProcess(Path(tmp) / "master", f"sqlite:///{db_path}").start()
        agent = ci.FakeAgent(master, 1)
        try:
            agent.start()
            admin_token = login(master.url, "admin")
            admin = requests.Session()
            admin.headers["Authorization"] = f"Bearer {admin_token}"
            config = {**ci.experiment_config(1), "name": "reader-load"}
            for _ in range(10):
                r = admin.post(f"{master.url}/api/v1/experiments",
                               json={"config": yaml.safe_dump(config), "modelDefinition": ci.MODEL_DEF})
                r.raise_for_status()
            deadline = time.monotonic() + 120
            while not agent.starts:
                if time.monotonic() > deadline or not agent.is_alive():
                    raise RuntimeError(f"the trial did not start: {agent.error!r}\n{master.log_tail()}")
                time.sleep(0.05)
            start = agent.starts[0]
            trial_id = int(start.env["DET_TRIAL_ID"])
            t0 = time.perf_counter()
            populate_logs(db_path, start.task_id, trial_id, start.allocation_id, args.log_lines)
            ci.populate_bulk(f"sqlite:///{db_path}", trial_id, args.metric_rows)
            print(f"set-up: {args.log_lines:,} log lines and {args.metric_rows:,} metric rows for trial "
                  f"{trial_id} in {time.perf_counter() - t0:.1f} s", flush=True)
            users = make_users(master.url, admin, args.users)
            follow_tokens = [users[i // PER_USER % len(users)] for i in range(args.followers)]
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            quiet_from = time.time() + 2.0  # the probe alone first: the machine's own latency, for scale
            quiet = ctx.Process(target=probe_main,
                                args=(master.port, admin_token, quiet_from, quiet_from + args.quiet, q))
            quiet.start()
            quiet_lat = q.get(timeout=args.quiet + 120)[1]["lat"]
            quiet.join(30)
            begin = time.time() + 2.0
            measure_from = begin + args.warmup
            stop = measure_from + args.duration
            procs = [
                ctx.Process(target=load_main, args=("followers", master.port, {
                    "path": f"/api/v1/trials/{trial_id}/logs?follow=true", "tokens": follow_tokens}, stop, q)),
                ctx.Process(target=load_main, args=("metrics", master.port, {
                    "path": f"/api/v1/trials/metrics/trial_metrics?trialIds={trial_id}&group=bulk",
                    "tokens": [admin_token] * args.metric_readers, "task_token": start.session_token,
                    "batch": args.log_batch}, stop, q)),
                ctx.Process(target=probe_main, args=(master.port, admin_token, measure_from, stop, q)),
            ]
            for p in procs:
                p.start()
            results = dict(q.get(timeout=args.warmup + args.duration + 300) for _ in procs)
            for p in procs:
                p.join(30)
        finally:
            master.stop()
    lat = results["probe"]["lat"]
    fol, met = results["followers"], results["metrics"]
    figures = {
        "quiet_info_p99_ms": ci.pct(quiet_lat["info"], 99), "quiet_list_p99_ms": ci.pct(quiet_lat["list"], 99),
        "info_p50_ms": ci.pct(lat["info"], 50), "info_p99_ms": ci.pct(lat["info"], 99),
        "list_p50_ms": ci.pct(lat["list"], 50), "list_p99_ms": ci.pct(lat["list"], 99),
        "probes": len(lat["info"]) + len(lat["list"]), "probe_errors": len(results["probe"]["errors"]),
        "followers_admitted": fol["status"].get("200", 0), "followers_refused": fol["status"].get("429", 0),
        "followers_ended_early": fol["ended"], "follower_mb": fol["bytes"] / 1e6,
        "metric_reads_done": met["reads"], "metric_mb": met["bytes"] / 1e6,
        "log_posts_ok": met["posts"].get("200", 0), "client_errors": fol["errors"] + met["errors"],
    }
    print(f"quiet (the probe alone, {args.quiet:.0f} s): GET /info p99 {figures['quiet_info_p99_ms']:.1f} ms, "
          f"10-row list p99 {figures['quiet_list_p99_ms']:.1f} ms", flush=True)
    print(f"under {args.followers} log followers ({figures['followers_admitted']:.0f} admitted, "
          f"{figures['followers_refused']:.0f} refused) and {args.metric_readers} metric readers "
          f"({figures['metric_reads_done']:.0f} whole reads, {figures['metric_mb']:.0f} MB) for {args.duration:.0f} s:",
          flush=True)
    print(f"  GET /info: p50 {figures['info_p50_ms']:.1f} ms, p99 {figures['info_p99_ms']:.1f} ms "
          f"({len(lat['info'])} probes)")
    print(f"  GET /api/v1/experiments?limit=10: p50 {figures['list_p50_ms']:.1f} ms, "
          f"p99 {figures['list_p99_ms']:.1f} ms ({len(lat['list'])} probes)")
    print(f"  followers read {figures['follower_mb']:.1f} MB; log posts acknowledged {figures['log_posts_ok']:.0f}; "
          f"probe errors {figures['probe_errors']:.0f}"
          + (f" (first: {results['probe']['errors'][0]})" if results["probe"]["errors"] else "")
          + f"; client errors {figures['client_errors']:.0f}"
          + (f" (first: {fol['first_error'] or met['first_error']})" if figures["client_errors"] else ""))
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--followers", type=int, default=200)
    p.add_argument("--metric-readers", type=int, default=5)
    p.add_argument("--users", type=int, default=25, help="followers are spread over this many users")
    p.add_argument("--log-lines", type=int, default=200_000)
    p.add_argument("--metric-rows", type=int, default=200_000)
    p.add_argument("--log-batch", type=int, default=10, help="lines the running trial posts every 0.5 s")
    p.add_argument("--duration", type=float, default=30.0, help="seconds measured")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of load before measuring")
    p.add_argument("--quiet", type=float, default=5.0, help="seconds the probe runs alone first")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    figures = run(args)
    met = [(figures["info_p99_ms"] < TARGET_P99_MS, f"/info p99 under {TARGET_P99_MS:.0f} ms"),
           (figures["list_p99_ms"] < TARGET_P99_MS, f"10-row list p99 under {TARGET_P99_MS:.0f} ms")]
    for ok, what in met:
        print(f"{'MET ' if ok else 'MISS'} {what}")
    figures["targets"], figures["targets_met"] = len(met), sum(ok for ok, _ in met)
    print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
