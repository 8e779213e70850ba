"""Distributed start-up and all-reduce throughput through the launchers.

1. Start time: a real det-master (SQLite in a temp dir) and two det-agents of 2 CPU slots each on
   this machine; --runs experiments of one 4-slot trial whose entrypoint is
   ``python3 -m launchers.torch_distributed first_line.py`` (a script that prints one line before
   importing anything). For each, the time from the allocation's ASSIGNED transition (the master's
   state_transitions row) to each rank's first line as the agent read it (task_logs.timestamp):
   the slowest rank is the run's start time. Target: under 2 s.
2. Throughput: the same gloo all-reduce script (--mb MB of float32, --iters timed iterations after
   two warm-ups) as two containers of two workers on loopback, once through
   ``launchers.torch_distributed`` (rendezvous.json as an agent writes it) and once under bare
   ``torch.distributed.run`` with the same nnodes/nproc_per_node, alternated --reps times; the
   median MB/s of each (bytes all-reduced per second by rank 0). Target: ratio at least 0.95.

Prints a table and MET/MISS per target, and ends with one key=value line.

    .venv/bin/python benchmarks/distributed_start.py
    .venv/bin/python benchmarks/distributed_start.py --runs 1 --reps 1 --mb 0.1 --iters 3   # smoke
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.cluster import AgentProcess, MasterProcess, login  # noqa: E402

FIRST_LINE = 'print("first line", flush=True)\n'

ALL_REDUCE = """\
import os, sys, time
import torch, torch.distributed as dist
mb, iters = float(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
t = torch.ones(max(1, int(mb * 1024 * 1024 / 4)), dtype=torch.float32)
for _ in range(2):
    dist.all_reduce(t)
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(t)
took = time.perf_counter() - start
if dist.get_rank() == 0:
    print(f"ALLREDUCE_MB_S {t.numel() * 4 * iters / took / 1e6:.3f}", flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _when(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# ---- 1. start time -------------------------------------------------------------------------
def create_experiment(url: str, headers: dict[str, str], name: str) -> int:
    config = {"name": name, "entrypoint": "python3 -m launchers.torch_distributed first_line.py",
              "resources": {"slots_per_trial": 4}, "max_restarts": 0,
              "searcher": {"name": "single", "metric": "x", "max_length": 1}}
    model_def = [{"path": "first_line.py", "type": 48, "content": base64.b64encode(FIRST_LINE.encode()).decode(),
                  "mtime": "0", "uid": 0, "gid": 0, "mode": 0o644}]
    r = requests.post(f"{url}/api/v1/experiments", headers=headers, timeout=60,
                      json={"config": yaml.safe_dump(config), "modelDefinition": model_def})
    r.raise_for_status()
    return int(r.json()["experiment"]["id"])


def wait_done(url: str, headers: dict[str, str], exp_id: int, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = requests.get(f"{url}/api/v1/experiments/{exp_id}", headers=headers, timeout=30).json()[
            "experiment"]["state"]
        if state in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
            return state
        time.sleep(0.2)
    raise TimeoutError(f"experiment {exp_id} did not end in {timeout_s:.0f}s")


def start_times(db: Path, exp_id: int) -> tuple[float, list[float], float]:
    """(seconds from ASSIGNED to the slowest rank's first line, each rank's, to RUNNING)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        trial_id = conn.execute("select id from trials where experiment_id = ?", (exp_id,)).fetchone()[0]
        alloc_id = conn.execute("select id from allocations where trial_id = ? order by created_at desc",
                                (trial_id,)).fetchone()[0]
        assigned = conn.execute("select at from state_transitions where entity = 'allocation' and entity_id = ? "
                                "and to_state = 'ASSIGNED'", (alloc_id,)).fetchone()[0]
        running = conn.execute("select at from state_transitions where entity = 'allocation' and entity_id = ? "
                               "and to_state = 'RUNNING'", (alloc_id,)).fetchone()[0]
        rows = conn.execute("select rank_id, min(timestamp) from task_logs where allocation_id = ? and log like ? "
                            "and rank_id is not null group by rank_id", (alloc_id, "%first line%")).fetchall()
    if len(rows) != 4:
        raise RuntimeError(f"experiment {exp_id}: first lines of ranks {sorted(r[0] for r in rows)} only")
    per_rank = [_when(ts) - _when(assigned) for _, ts in sorted(rows)]
    return max(per_rank), per_rank, _when(running) - _when(assigned)


def measure_start(args: argparse.Namespace, work: Path) -> list[float]:
    master = MasterProcess(work / "master", f"sqlite:///{work}/master.db").start()
    agents = [AgentProcess(master, f"bench-agent-{i}", 2, work / "agents" / str(i)).start() for i in range(2)]
    try:
        headers = {"Authorization": f"Bearer {login(master.url)}"}
        deadline = time.monotonic() + 60
        while len([a for a in requests.get(f"{master.url}/api/v1/agents", headers=headers, timeout=10).json()[
                "agents"] if a.get("connected", True)]) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the agents did not register")
            time.sleep(0.2)
        times = []
        for run in range(args.runs):
            exp_id = create_experiment(master.url, headers, f"start-{run}")
            state = wait_done(master.url, headers, exp_id)
            if state != "STATE_COMPLETED":
                raise RuntimeError(f"experiment {exp_id} ended {state}:\n{master.log_tail()}")
            slowest, per_rank, running = start_times(work / "master.db", exp_id)
            print(f"run {run + 1}: ranks' first lines {', '.join(f'{t:.2f}' for t in per_rank)} s after ASSIGNED "
                  f"(RUNNING, the first container's process started, at {running:.2f} s)")
            times.append(slowest)
        return times
    finally:
        for a in agents:
            a.stop()
        master.stop()


# ---- 2. all-reduce throughput ----------------------------------------------------------------
def _info(path: Path, rank: int, chief_port: int, dist_ports: list[int]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cluster.json").write_text(json.dumps({
        "master_url": "http://127.0.0.1:1", "cluster_id": "bench", "agent_id": f"a{rank}", "slot_ids": [0, 1],
        "task_id": "t", "allocation_id": "t.1", "session_token": "x", "task_type": "TRIAL"}))
    (path / "rendezvous.json").write_text(json.dumps({
        "container_addrs": ["127.0.0.1", "127.0.0.1"], "container_rank": rank, "container_slot_counts": [2, 2],
        "chief_port": chief_port, "dist_ports": dist_ports, "ssh_ports": [0, 0]}))
    return path


def _run_pair(commands: list[list[str]], envs: list[dict[str, str]], cwd: Path) -> float:
    procs = [subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd, env in zip(commands, envs, strict=True)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(p.args)} exited {p.returncode}:\n{err[-3000:]}")  # type: ignore[arg-type]
    found = re.search(r"ALLREDUCE_MB_S ([\d.]+)", outs[0][0] + outs[1][0])
    if not found:
        raise RuntimeError(f"no throughput line in:\n{outs[0][0][-2000:]}")
    return float(found.group(1))


def through_launcher(work: Path, args: argparse.Namespace) -> float:
    port, dist = free_port(), [free_port(), free_port()]
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    envs = [{**base, "DET_INFO_DIR": str(_info(work / f"info{r}", r, port, dist))} for r in (0, 1)]
    cmd = [sys.executable, "-m", "launchers.torch_distributed", "allreduce.py", str(args.mb), str(args.iters)]
    return _run_pair([cmd, cmd], envs, work)


def through_torchrun(work: Path, args: argparse.Namespace) -> float:
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    cmds = [[sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(r),
             "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
             "allreduce.py", str(args.mb), str(args.iters)] for r in (0, 1)]
    return _run_pair(cmds, [base, base], work)


def bare_torchrun_start(work: Path) -> float:
    """For scale: two bare torch.distributed.run of 2 workers on loopback, from their start to the
    last of the 4 first lines (the floor the launcher stands on: torch's import and rendezvous)."""
    (work / "first_line.py").write_text(FIRST_LINE)
    port = free_port()
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(r),
                               "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               "first_line.py"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for r in (0, 1)]
    seen: list[float] = []

    def read(p: subprocess.Popen[Any]) -> None:  # each node's lines as they come (node 0 ends after node 1)
        assert p.stdout is not None
        for line in p.stdout:  # two workers' lines may share one read: count every one
            seen.extend([time.monotonic() - t0] * line.count("first line"))

    readers = [threading.Thread(target=read, args=(p,)) for p in procs]
    for t in readers:
        t.start()
    for t in readers:
        t.join(120)
    for p in procs:
        p.wait(120)
    if len(seen) != 4 or any(p.returncode for p in procs):
        raise RuntimeError(f"bare torchrun printed {len(seen)} first lines, not 4 (exits "
                           f"{[p.returncode for p in procs]})")
    return max(seen)


def measure_throughput(args: argparse.Namespace, work: Path) -> tuple[list[float], list[float]]:
    (work / "allreduce.py").write_text(ALL_REDUCE)
    launcher: list[float] = []
    bare: list[float] = []
    for rep in range(args.reps):
        order = (("launcher", through_launcher), ("torchrun", through_torchrun))
        for name, fn in order if rep % 2 == 0 else tuple(reversed(order)):
            mb_s = fn(work, args)
            (launcher if name == "launcher" else bare).append(mb_s)
            print(f"rep {rep + 1}: {name:<8} {mb_s:9.1f} MB/s")
    return launcher, bare


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="4-rank experiments timed for the start (default 5)")
    ap.add_argument("--reps", type=int, default=5, help="all-reduce runs of each kind, alternated (default 5)")
    ap.add_argument("--mb", type=float, default=16.0, help="MB of float32 all-reduced per iteration (default 16)")
    ap.add_argument("--iters", type=int, default=20, help="timed all-reduce iterations per run (default 20)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="det-dist-bench-") as tmp:
        work = Path(tmp)
        starts = measure_start(args, work / "cluster")
        (work / "ar").mkdir()
        bare_starts = [bare_torchrun_start(work / "ar") for _ in range(args.runs)]
        print("bare torch.distributed.run 2x2, start -> all 4 first lines: "
              + ", ".join(f"{t:.2f}" for t in bare_starts) + " s")
        launcher, bare = measure_throughput(args, work / "ar")
    start_p50, start_max = statistics.median(starts), max(starts)
    bare_start_p50 = statistics.median(bare_starts)
    launcher_mb_s, bare_mb_s = statistics.median(launcher), statistics.median(bare)
    ratio = launcher_mb_s / bare_mb_s if bare_mb_s else 0.0
    print()
    print(f"{'figure':<44}{'value':>12}")
    print(f"{'start, allocation -> all 4 first lines, p50':<44}{start_p50:>10.2f} s")
    print(f"{'start, allocation -> all 4 first lines, max':<44}{start_max:>10.2f} s")
    print(f"{'for scale: bare torchrun 2x2 start, p50':<44}{bare_start_p50:>10.2f} s")
    print(f"{'gloo all-reduce via launchers.torch_distributed':<44}{launcher_mb_s:>7.1f} MB/s")
    print(f"{'gloo all-reduce via bare torch.distributed.run':<44}{bare_mb_s:>7.1f} MB/s")
    print(f"{'ratio launcher / bare':<44}{ratio:>12.3f}")
    targets = [(start_p50 < 2.0, f"start p50 {start_p50:.2f} s < 2 s"),
               (ratio >= 0.95, f"all-reduce ratio {ratio:.3f} >= 0.95")]
    for ok, text in targets:
        print(("MET  " if ok else "MISS ") + text)
    print(f"start_p50_s={start_p50:.3f} start_max_s={start_max:.3f} runs={len(starts)} "
          f"bare_torchrun_start_p50_s={bare_start_p50:.3f} "
          f"allreduce_launcher_mb_s={launcher_mb_s:.2f} allreduce_torchrun_mb_s={bare_mb_s:.2f} "
          f"allreduce_ratio={ratio:.3f} targets={len(targets)} targets_met={sum(ok for ok, _ in targets)}")


if __name__ == "__main__":
    main()
