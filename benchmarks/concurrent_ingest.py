"""Concurrent metric ingest: N trials, each with its own task token, posting metric batches to one
real master while other clients list experiments; then /info under a big config create and a
paginated 1 M-row metrics read.

For each backend (SQLite in a temp dir; PostgreSQL in a scratch database created on --pg-url and
dropped after) and each N of --trials, a fresh det-master is started on a free loopback port. A
fake agent registers over the agent WebSocket with N CPU slots; one `random` experiment with
max_trials = max_concurrent_trials = N is created and the agent answers every StartTask with
TaskStarted, so each trial has a live allocation and its session token. Then, for --duration
seconds, N clients (spread over --client-procs processes, each a lean keep-alive HTTP/1.1
client on its own connection) post `POST /api/v1/trials/{id}/metrics/batch` bodies of --batch
rows each, every row a new step, with `Grpc-Metadata-x-allocation-token`; --listers clients
(one more process) call `GET /api/v1/experiments` every --list-interval-ms.

Closed loop (default): each trial client posts its next batch as soon as the previous one is
acknowledged, so rows/s is the saturation throughput and the ack latencies are latencies at
saturation. With --paced-rows-per-s R the N clients together offer R rows/s on a fixed schedule
and a latency is measured from the scheduled send time (no coordinated omission).

Ack latency: from the request's first byte written to the 200 read (a 200 means committed).
Master RSS: the peak of /proc/<pid>/status VmRSS sampled every 0.25 s during the run.

Then (on the last N's master of each backend) --big-rows metric rows are written straight into
the database for one trial (group "bulk"), and three things run at once: one client reads them
all through `GET /api/v1/trials/{id}/metrics?group=bulk&limit=1000`, following nextCursor;
one posts --config-mb MB experiment configs (max_config_bytes raised to allow them) one after
another; one probes `GET /info` every 20 ms. The /info latencies are reported while both are
in flight.

Prints one line per run and MET/MISS per target, and ends with one key=value line.

    .venv/bin/python benchmarks/concurrent_ingest.py                       # both backends, N=20,100
    .venv/bin/python benchmarks/concurrent_ingest.py --backends sqlite --trials 100 --duration 10
    .venv/bin/python benchmarks/concurrent_ingest.py --backends sqlite --trials 2 --duration 1 \\
        --big-rows 2000 --config-mb 0.05 --client-procs 1                 # smoke, ~20 s
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing as mp
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datetime import UTC

from controlplane.wire import agent_protocol as wire
from tests.support.cluster import MasterProcess, login

TARGET_PG_ROWS_PER_S = 20_000
TARGET_PG_ACK_P99_MS = 100.0
TARGET_SQLITE_ACK_P99_MS = 250.0
TARGET_LIST_P99_MS = 100.0
TARGET_N = 100

MODEL_DEF = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print('bench')\n").decode(),
              "mtime": "0"}]


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


# ---- a lean HTTP/1.1 client (the client must not be what is measured) ----------------------------


class HttpConn:
    """One keep-alive connection; requests in sequence."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    async def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                      body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            await self._open()
        assert self.reader is not None and self.writer is not None
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method == "POST":
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            await self.close()
            raise
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        hdrs = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        if "content-length" in hdrs:
            data = await self.reader.readexactly(int(hdrs["content-length"]))
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        else:
            data = await self.reader.read()
            await self.close()
        if hdrs.get("connection", "").lower() == "close":
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass
        self.reader = self.writer = None


def _use_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


# ---- client processes ---------------------------------------------------------------------------


@dataclass
class Work:
    role: str  # "ingest" | "list" | "info" | "bigread" | "create"
    host: str
    port: int
    start_at: float  # time.time() to start
    duration_s: float  # measured seconds, after the warm-up
    warmup_s: float = 0.0
    trials: list[tuple[int, str, int]] = field(default_factory=list)  # (trial id, session token, run id)
    batch: int = 100
    interval_s: float = 0.0  # pacing per client (0: closed loop)
    clients: int = 1
    user_token: str = ""
    big_trial: int = 0
    config_text: str = ""


_ROW_METRICS = ("loss", "accuracy", "lr", "grad_norm")


def _batch_body(step0: int, batch: int, run_id: int) -> bytes:
    reports = [{"group": "training", "stepsCompleted": s, "trialRunId": run_id,
                "metrics": {"avgMetrics": {"loss": 1.0 / (s + 1), "accuracy": s / (s + 1.0), "lr": 0.001,
                                           "grad_norm": 0.5 + (s % 7) / 10}}}
               for s in range(step0, step0 + batch)]
    return msgspec.json.encode({"reports": reports})


async def _ingest_one(w: Work, trial_id: int, token: str, run_id: int, out: dict[str, Any]) -> None:
    conn = HttpConn(w.host, w.port)
    headers = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    path = f"/api/v1/trials/{trial_id}/metrics/batch"
    measure_from = w.start_at + w.warmup_s
    step, deadline = 0, measure_from + w.duration_s
    await asyncio.sleep(max(0.0, w.start_at - time.time()))
    nxt = time.time() + random.uniform(0, w.interval_s)  # paced clients spread over the period, not in step
    while True:
        if w.interval_s:
            nxt += w.interval_s
            if nxt >= deadline:
                break
            await asyncio.sleep(max(0.0, nxt - time.time()))
            t0 = nxt  # from the scheduled time: a late send counts as latency
        else:
            t0 = time.time()
            if t0 >= deadline:
                break
        body = _batch_body(step, w.batch, run_id)
        if not w.interval_s:
            t0 = time.time()
        try:
            status, data = await conn.request("POST", path, headers, body)
        except Exception as e:  # noqa: BLE001
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{type(e).__name__}: {e}"
            await asyncio.sleep(0.05)
            continue
        t1 = time.time()
        if status == 200:
            step += w.batch
            out["batches_all"] += 1
            if t0 >= measure_from:  # sent after the warm-up: its latency counts
                out["lat"].append((t1 - t0) * 1000)
            if measure_from <= t1 <= deadline:  # acknowledged in the window: its rows count
                out["rows"] += w.batch
        else:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{status}: {data[:300]!r}"
            await asyncio.sleep(0.05)
    await conn.close()


async def _lister(w: Work, out: dict[str, Any]) -> None:
    conn = HttpConn(w.host, w.port)
    headers = {"Authorization": f"Bearer {w.user_token}"}
    measure_from = w.start_at + w.warmup_s
    deadline = measure_from + w.duration_s
    await asyncio.sleep(max(0.0, w.start_at - time.time()))
    while time.time() < deadline:
        t0 = time.time()
        try:
            status, data = await conn.request("GET", "/api/v1/experiments?limit=100", headers)
        except Exception as e:  # noqa: BLE001
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{type(e).__name__}: {e}"
            continue
        t1 = time.time()
        if status == 200:
            if t0 >= measure_from:
                out["lat"].append((t1 - t0) * 1000)
        else:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{status}: {data[:300]!r}"
        await asyncio.sleep(max(0.0, w.interval_s - (time.time() - t0)))


async def _info_probe(w: Work, out: dict[str, Any], stop: asyncio.Event | None = None) -> None:
    conn = HttpConn(w.host, w.port)
    deadline = w.start_at + w.duration_s
    while time.time() < deadline and not (stop and stop.is_set()):
        t0 = time.time()
        status, _ = await conn.request("GET", "/info")
        if status == 200:
            out["lat"].append((time.time() - t0) * 1000)
        else:
            out["errors"] += 1
        await asyncio.sleep(max(0.0, w.interval_s - (time.time() - t0)))
    await conn.close()


async def _bigread(w: Work, out: dict[str, Any]) -> None:
    conn = HttpConn(w.host, w.port)
    headers = {"Authorization": f"Bearer {w.user_token}"}
    base = f"/api/v1/trials/{w.big_trial}/metrics?group=bulk&limit=1000"
    cursor: str | None = None
    t0 = time.time()
    page_lat = []
    while True:
        path = base + (f"&cursor={cursor}" if cursor else "")
        p0 = time.time()
        status, data = await conn.request("GET", path, headers)
        page_lat.append((time.time() - p0) * 1000)
        if status != 200:
            out["errors"] += 1
            out["first_error"] = f"{status}: {data[:300]!r}"
            break
        page = msgspec.json.decode(data)
        out["rows"] += len(page["metrics"])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    out["elapsed_s"] = time.time() - t0
    out["lat"] = page_lat
    await conn.close()


async def _creator(w: Work, out: dict[str, Any], stop: asyncio.Event) -> None:
    conn = HttpConn(w.host, w.port)
    headers = {"Authorization": f"Bearer {w.user_token}"}
    body = msgspec.json.encode({"config": w.config_text, "modelDefinition": MODEL_DEF})
    while True:
        t0 = time.time()
        status, data = await conn.request("POST", "/api/v1/experiments", headers, body)
        out["lat"].append((time.time() - t0) * 1000)
        if status != 200:
            out["errors"] += 1
            out["first_error"] = out["first_error"] or f"{status}: {data[:300]!r}"
        if stop.is_set():
            break
    await conn.close()


def _new_out() -> dict[str, Any]:
    return {"lat": [], "rows": 0, "errors": 0, "first_error": "", "batches_all": 0, "elapsed_s": 0.0}


def client_main(w: Work, q: Any, index: int = 0) -> None:
    _use_uvloop()

    async def run() -> dict[str, Any]:
        out = _new_out()
        if w.role == "ingest":
            await asyncio.gather(*(_ingest_one(w, tid, tok, run, out) for tid, tok, run in w.trials))
        elif w.role == "list":
            await asyncio.gather(*(_lister(w, out) for _ in range(w.clients)))
        elif w.role == "info":
            await asyncio.sleep(max(0.0, w.start_at - time.time()))
            await _info_probe(w, out)
        elif w.role == "bigread+create":
            await asyncio.sleep(max(0.0, w.start_at - time.time()))
            stop = asyncio.Event()
            create_out = _new_out()
            creator = asyncio.create_task(_creator(w, create_out, stop))
            await _bigread(w, out)
            stop.set()
            await creator
            out["create"] = create_out
        return out

    try:
        q.put((index, asyncio.run(run())))
    except Exception as e:  # noqa: BLE001
        q.put((index, {**_new_out(), "errors": 1, "first_error": f"client crashed: {type(e).__name__}: {e}"}))


def run_clients(works: list[Work], timeout_s: float) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=client_main, args=(w, q, i), daemon=True) for i, w in enumerate(works)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=timeout_s) for _ in procs)  # in the order they finish
    for p in procs:
        p.join(10)
    return [results[i] for i in range(len(works))]


# ---- the fake agent -----------------------------------------------------------------------------


class FakeAgent(threading.Thread):
    """Registers over the agent WebSocket with `slots` CPU slots and answers each StartTask with
    TaskStarted; keeps the connection (the allocations stay live) until the master stops."""

    def __init__(self, master: MasterProcess, slots: int) -> None:
        super().__init__(daemon=True)
        self.master, self.slots = master, slots
        self.starts: list[wire.StartTask] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001
            self.error = e

    async def _main(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        url = f"ws://127.0.0.1:{self.master.port}/agents/ws"
        async with connect(url, additional_headers={"Authorization": f"Bearer {self.master.join_token}"},
                           max_size=None) as ws:
            slots = [wire.Slot(id=i, type="cpu", brand="cpu") for i in range(self.slots)]
            await ws.send(wire.encode(wire.Register(agent_id="bench-agent", slots=slots)).decode())
            wire.decode_from_master(await ws.recv())
            try:
                async for raw in ws:
                    msg = wire.decode_from_master(raw)
                    if isinstance(msg, wire.StartTask):
                        await ws.send(wire.encode(wire.TaskStarted(msg.allocation_id, os.getpid(),
                                                                   time.time())).decode())
                        self.starts.append(msg)
            except ConnectionClosed:
                pass


# ---- one run ------------------------------------------------------------------------------------


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.stop = pid, 0, threading.Event()

    def now_kb(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def cpu_s(self) -> float:
        """User + system CPU seconds the master has used."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak_kb = max(self.peak_kb, self.now_kb())
            self.stop.wait(0.25)


def experiment_config(n: int) -> dict[str, Any]:
    return {"name": f"ingest-{n}", "entrypoint": "python3 train.py",
            "hyperparameters": {"lr": {"type": "double", "minval": 0.0001, "maxval": 0.1}},
            "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": n,
                         "max_concurrent_trials": n, "max_length": {"batches": 1_000_000}},
            "reproducibility": {"experiment_seed": 1}}


def big_config_text(mb: float) -> str:
    """A config of about `mb` MB: a valid experiment whose `data` holds many plain values."""
    base = yaml.safe_dump({"name": "big-config", "entrypoint": "python3 train.py", "hyperparameters": {},
                           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})
    line_bytes = 100
    n = max(1, int(mb * 1024 * 1024 / line_bytes))
    value = "x" * (line_bytes - 14)
    return base + "data:\n" + "".join(f"  k{i:08d}: {value}\n" for i in range(n))


def populate_bulk(db_url: str, trial_id: int, rows: int) -> float:
    """Writes `rows` metric rows (group "bulk") for `trial_id` straight into the database."""
    t0 = time.perf_counter()
    metrics = '{"loss": 0.25, "accuracy": 0.75, "lr": 0.001, "grad_norm": 0.5}'
    chunk = 50_000
    if db_url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(db_url.split("sqlite:///", 1)[1], timeout=60)
        for start in range(0, rows, chunk):
            with conn:
                conn.executemany(
                    "INSERT INTO metrics (trial_id, trial_run_id, metric_group, steps_completed, metrics, "
                    "batch_metrics, report_time) VALUES (?, 0, 'bulk', ?, ?, NULL, '2024-01-01 00:00:00.000000')",
                    ((trial_id, s, metrics) for s in range(start, min(rows, start + chunk))))
        conn.close()
    else:
        from datetime import datetime

        import asyncpg

        async def copy() -> None:
            conn = await asyncpg.connect(db_url)
            when = datetime(2024, 1, 1, tzinfo=UTC)
            for start in range(0, rows, chunk):
                await conn.copy_records_to_table(
                    "metrics", columns=["trial_id", "trial_run_id", "metric_group", "steps_completed", "metrics",
                                        "report_time"],
                    records=[(trial_id, 0, "bulk", s, metrics, when) for s in range(start, min(rows, start + chunk))])
            await conn.execute("ANALYZE metrics")
            await conn.close()

        asyncio.run(copy())
    return time.perf_counter() - t0


def ingest_run(backend: str, db_url: str, n: int, args: argparse.Namespace, figures: dict[str, float],
               then_info: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        extra = {"max_config_bytes": int(max(args.config_mb, 1) * 1024 * 1024 * 1.5) + 4096}
        master = MasterProcess(Path(tmp) / "master", db_url.replace("TMP", tmp), extra=extra).start()
        db_url = db_url.replace("TMP", tmp)
        agent = FakeAgent(master, n)
        try:
            agent.start()
            token = login(master.url)
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {token}"
            r = s.post(f"{master.url}/api/v1/experiments",
                       json={"config": yaml.safe_dump(experiment_config(n)), "modelDefinition": MODEL_DEF})
            r.raise_for_status()
            deadline = time.monotonic() + 120
            while len(agent.starts) < n:
                if agent.error is not None or not agent.is_alive():
                    raise RuntimeError(f"fake agent stopped: {agent.error!r}\n{master.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {len(agent.starts)} of {n} trials started:\n{master.log_tail()}")
                time.sleep(0.05)
            trials = [(int(m.env["DET_TRIAL_ID"]), m.session_token, int(m.env["DET_TRIAL_RUN_ID"]))
                      for m in agent.starts]
            assert master.proc is not None
            rss = RssSampler(master.proc.pid)
            base_kb = rss.now_kb()
            rss.start()
            procs = max(1, min(args.client_procs, n))
            start_at = time.time() + 3.0  # the client processes start (spawn) meanwhile
            interval = 0.0
            if args.paced_rows_per_s:
                interval = n * args.batch / args.paced_rows_per_s
            works = [Work("ingest", "127.0.0.1", master.port, start_at, args.duration, args.warmup,
                          trials=trials[k::procs], batch=args.batch, interval_s=interval) for k in range(procs)]
            if args.listers:
                works.append(Work("list", "127.0.0.1", master.port, start_at, args.duration, args.warmup,
                                  clients=args.listers,
                                  interval_s=args.list_interval_ms / 1000.0, user_token=token))
            spy = None
            if args.profile:
                import subprocess

                Path(args.profile).mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "--format", "raw",
                     "-r", "50", "-d", str(int(args.duration + args.warmup) + 3), "-p", str(master.proc.pid),
                     "-o", str(Path(args.profile) / f"master-{backend}-n{n}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cpu0 = rss.cpu_s()
            results = run_clients(works, timeout_s=args.duration + args.warmup + 120)
            cpu = rss.cpu_s() - cpu0
            if spy is not None:
                spy.wait(60)
            rss.stop.set()
            rss.join()
            ingest = results[:procs]
            listed = results[procs:]
            lat = [x for res in ingest for x in res["lat"]]
            rows = sum(res["rows"] for res in ingest)
            elapsed = args.duration
            batches_all = sum(res["batches_all"] for res in ingest)  # warm-up included, as the CPU time
            list_lat = [x for res in listed for x in res["lat"]]
            errors = sum(res["errors"] for res in results)
            first_error = next((res["first_error"] for res in results if res["first_error"]), "")
            key = f"{backend}_n{n}"
            figures.update({
                f"{key}_rows_per_s": rows / elapsed, f"{key}_ack_p50_ms": pct(lat, 50),
                f"{key}_ack_p99_ms": pct(lat, 99), f"{key}_list_p50_ms": pct(list_lat, 50),
                f"{key}_list_p99_ms": pct(list_lat, 99), f"{key}_rss_mb": rss.peak_kb / 1024,
                f"{key}_master_cpu_ms_per_batch": cpu * 1000 / max(batches_all, 1),
                f"{key}_rows_per_master_cpu_s": batches_all * args.batch / cpu if cpu > 0 else float("nan"),
                f"{key}_errors": errors})
            mode = (f"paced at {args.paced_rows_per_s:,.0f} rows/s offered" if args.paced_rows_per_s
                    else "closed loop (saturation)")
            print(f"{backend} N={n}: {rows:,} rows in {elapsed:.1f} s = {rows / elapsed:,.0f} rows/s "
                  f"({len(lat)} batches of {args.batch}, {mode}); ack p50 {pct(lat, 50):.1f} ms, "
                  f"p99 {pct(lat, 99):.1f} ms, max {max(lat, default=float('nan')):.1f} ms; "
                  f"list p50 {pct(list_lat, 50):.1f} ms, p99 {pct(list_lat, 99):.1f} ms ({len(list_lat)} lists); "
                  f"master RSS {base_kb / 1024:.0f} MB idle, {rss.peak_kb / 1024:.0f} MB peak; master CPU "
                  f"{cpu:.1f} s = {cpu * 1000 / max(batches_all, 1):.1f} ms per batch (lists included), "
                  f"{batches_all * args.batch / cpu if cpu > 0 else float('nan'):,.0f} rows per master CPU second; "
                  f"errors {errors}"
                  + (f" (first: {first_error})" if first_error else ""), flush=True)
            if then_info and args.big_rows > 0:
                info_run(backend, db_url, master, token, trials[0][0], args, figures)
        finally:
            master.stop()
            if args.master_logs:
                Path(args.master_logs).mkdir(parents=True, exist_ok=True)
                (Path(args.master_logs) / f"master-{backend}-n{n}.log").write_bytes(master.log_path.read_bytes())


def info_run(backend: str, db_url: str, master: MasterProcess, token: str, trial_id: int,
             args: argparse.Namespace, figures: dict[str, float]) -> None:
    took = populate_bulk(db_url, trial_id, args.big_rows)
    print(f"{backend}: wrote {args.big_rows:,} bulk rows for trial {trial_id} straight into the database "
          f"in {took:.1f} s", flush=True)
    start_at = time.time() + 3.0
    config_text = big_config_text(args.config_mb)
    probe = Work("info", "127.0.0.1", master.port, start_at, 600, interval_s=0.02)
    load = Work("bigread+create", "127.0.0.1", master.port, start_at, 600, user_token=token, big_trial=trial_id,
                config_text=config_text)
    # The probe runs until the reader and the creator are done: it is told by its duration, so
    # run the load first and then cut the probe's samples to the load's span.
    ctx = mp.get_context("spawn")
    q_probe, q_load = ctx.Queue(), ctx.Queue()
    stop_file = Path(tempfile.gettempdir()) / f"ingest-bench-{uuid.uuid4().hex}"
    p_probe = ctx.Process(target=_probe_until, args=(probe, q_probe, str(stop_file)), daemon=True)
    p_load = ctx.Process(target=client_main, args=(load, q_load), daemon=True)
    p_probe.start()
    p_load.start()
    loaded = q_load.get(timeout=900)[1]
    stop_file.touch()
    probed = q_probe.get(timeout=60)
    p_probe.join(10)
    p_load.join(10)
    stop_file.unlink(missing_ok=True)
    created = loaded.get("create", _new_out())
    lat = probed["lat"]
    figures.update({f"{backend}_info_p50_ms": pct(lat, 50), f"{backend}_info_p99_ms": pct(lat, 99),
                    f"{backend}_bigread_rows_per_s": loaded["rows"] / max(loaded["elapsed_s"], 1e-9),
                    f"{backend}_bigread_page_p99_ms": pct(loaded["lat"], 99),
                    f"{backend}_config_create_s": pct(created["lat"], 50) / 1000,
                    f"{backend}_info_errors": probed["errors"] + loaded["errors"] + created["errors"]})
    err = loaded["first_error"] or created["first_error"]
    print(f"{backend}: /info p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms, max {max(lat, default=0):.1f} ms "
          f"({len(lat)} probes) while reading {loaded['rows']:,} rows in pages of 1000 "
          f"({loaded['rows'] / max(loaded['elapsed_s'], 1e-9):,.0f} rows/s, page p99 {pct(loaded['lat'], 99):.0f} ms) "
          f"and creating {len(created['lat'])} experiments with a {len(config_text) / 1e6:.1f} MB config "
          f"(median {pct(created['lat'], 50) / 1000:.2f} s each)" + (f"; error: {err}" if err else ""), flush=True)


def _probe_until(w: Work, q: Any, stop_file: str) -> None:
    _use_uvloop()

    async def run() -> dict[str, Any]:
        out = _new_out()
        stop = asyncio.Event()

        async def watch() -> None:
            while not os.path.exists(stop_file):
                await asyncio.sleep(0.05)
            stop.set()

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(max(0.0, w.start_at - time.time()))
        await _info_probe(w, out, stop)
        watcher.cancel()
        return out

    q.put(asyncio.run(run()))


# ---- main ---------------------------------------------------------------------------------------


def pg_scratch(admin_url: str) -> tuple[str, Any]:
    import asyncpg

    name = f"det_ingest_bench_{uuid.uuid4().hex[:8]}"

    async def do(sql: str) -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(do(f'CREATE DATABASE "{name}"'))
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    return url, lambda: asyncio.run(do(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def check_targets(figures: dict[str, float]) -> list[tuple[bool, str]]:
    checks = []
    k = f"postgres_n{TARGET_N}"
    if f"{k}_rows_per_s" in figures:
        checks.append((figures[f"{k}_rows_per_s"] >= TARGET_PG_ROWS_PER_S,
                       f"PostgreSQL, {TARGET_N} trials: {figures[f'{k}_rows_per_s']:,.0f} rows/s >= "
                       f"{TARGET_PG_ROWS_PER_S:,}"))
        checks.append((figures[f"{k}_ack_p99_ms"] < TARGET_PG_ACK_P99_MS,
                       f"PostgreSQL, {TARGET_N} trials: ack p99 {figures[f'{k}_ack_p99_ms']:.1f} ms < "
                       f"{TARGET_PG_ACK_P99_MS:.0f} ms"))
    k = f"sqlite_n{TARGET_N}"
    if f"{k}_ack_p99_ms" in figures:
        checks.append((figures[f"{k}_ack_p99_ms"] < TARGET_SQLITE_ACK_P99_MS,
                       f"SQLite, {TARGET_N} trials: ack p99 {figures[f'{k}_ack_p99_ms']:.1f} ms < "
                       f"{TARGET_SQLITE_ACK_P99_MS:.0f} ms"))
    for backend in ("sqlite", "postgres"):
        k = f"{backend}_n{TARGET_N}_list_p99_ms"
        if k in figures:
            checks.append((figures[k] < TARGET_LIST_P99_MS,
                           f"{backend}, {TARGET_N} trials: list p99 {figures[k]:.1f} ms < {TARGET_LIST_P99_MS:.0f} ms"))
    return checks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="sqlite,postgres", help="comma list of sqlite, postgres (default both)")
    ap.add_argument("--trials", default="20,100", help="comma list of N, trials posting at once (default 20,100)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of ingest per run (default 20)")
    ap.add_argument("--warmup", type=float, default=3.0,
                    help="seconds of load before the measured --duration (token lookups, prepared statements)")
    ap.add_argument("--batch", type=int, default=100, help="rows per batch (default 100)")
    ap.add_argument("--client-procs", type=int, default=2,
                    help="processes the trial clients are spread over (default 2)")
    ap.add_argument("--listers", type=int, default=2, help="clients listing experiments (default 2)")
    ap.add_argument("--list-interval-ms", type=float, default=100.0, help="each lister's period (default 100 ms)")
    ap.add_argument("--paced-rows-per-s", type=float, default=0.0,
                    help="offer this many rows/s in all on a fixed schedule instead of a closed loop")
    ap.add_argument("--big-rows", type=int, default=1_000_000,
                    help="rows of the paginated read (default 1,000,000; 0 skips the /info phase)")
    ap.add_argument("--config-mb", type=float, default=10.0, help="size of the big config in MB (default 10)")
    ap.add_argument("--profile", default="",
                    help="record the master with py-spy (raw folded stacks) into this directory")
    ap.add_argument("--master-logs", default="", help="copy each master's log into this directory")
    ap.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="a PostgreSQL database to create the scratch database from")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    ns = [int(x) for x in args.trials.split(",") if x.strip()]
    figures: dict[str, float] = {}
    for backend in backends:
        for i, n in enumerate(ns):
            last = i == len(ns) - 1
            if backend == "sqlite":
                ingest_run(backend, "sqlite:///TMP/master/master.db", n, args, figures, then_info=last)
            elif backend == "postgres":
                url, drop = pg_scratch(args.pg_url)
                try:
                    ingest_run(backend, url, n, args, figures, then_info=last)
                finally:
                    drop()
            else:
                raise SystemExit(f"unknown backend {backend!r}")
    checks = check_targets(figures)
    for ok, text in checks:
        print(("MET  " if ok else "MISS ") + text)
    figures["targets"] = len(checks)
    figures["targets_met"] = sum(ok for ok, _ in checks)
    print(" ".join(f"{k}={v:.0f}" if k.endswith(("errors", "targets", "targets_met")) else f"{k}={v:.2f}"
                   for k, v in figures.items()))


if __name__ == "__main__":
    main()
