"""Trial start overhead on a warm agent, and zero-length trials completed per second.

Starts a real det-master (SQLite) and one real det-agent with 4 CPU slots.
- start latency: for each of --starts sequential one-trial experiments, the time from the
  allocation's ASSIGNED transition (master clock) to the agent reading the first line the
  user script prints (same machine, same clock). The first run warms the context cache and
  is not counted.
- loop throughput: one `random` experiment of --trials trials whose script exits at once,
  4 at a time; trials/s from create to the experiment's COMPLETED.

    .venv/bin/python benchmarks/trial_loop.py [--starts 20] [--trials 60]
"""

from __future__ import annotations

import argparse
import base64
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.cluster import AgentProcess, MasterProcess, login, wait_for

SCRIPT = b"print('first line', flush=True)\n"


def create(s: requests.Session, url: str, config: dict[str, Any]) -> int:
    files = [{"path": "start.py", "type": 48, "content": base64.b64encode(SCRIPT).decode(), "mtime": "0"}]
    r = s.post(f"{url}/api/v1/experiments", json={"config": yaml.safe_dump(config), "modelDefinition": files})
    r.raise_for_status()
    return r.json()["experiment"]["id"]


def wait_done(s: requests.Session, url: str, exp_id: int, timeout: float = 600) -> None:
    def done() -> str | None:
        state = s.get(f"{url}/api/v1/experiments/{exp_id}").json()["experiment"]["state"]
        return state if state in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED") else None

    state = wait_for(done, timeout, f"experiment {exp_id}", interval_s=0.02)
    if state != "STATE_COMPLETED":
        raise SystemExit(f"experiment {exp_id} ended {state}")


def start_latency_ms(db: Path, s: requests.Session, url: str, exp_id: int) -> float:
    trial_id = s.get(f"{url}/api/v1/experiments/{exp_id}").json()["experiment"]["trialIds"][0]
    lines = [line for line in s.get(f"{url}/api/v1/trials/{trial_id}/logs?follow=false").iter_lines() if line]
    first = next(json.loads(line)["result"] for line in lines if b"first line" in line)
    first_at = datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00"))
    with sqlite3.connect(db) as conn:
        (assigned,) = conn.execute(
            "SELECT st.at FROM state_transitions st JOIN allocations a ON a.id = st.entity_id "
            "WHERE st.entity = 'allocation' AND st.to_state = 'ASSIGNED' AND a.trial_id = ?", (trial_id,)).fetchone()
    assigned_at = datetime.fromisoformat(assigned)
    if assigned_at.tzinfo is None:
        assigned_at = assigned_at.replace(tzinfo=first_at.tzinfo)
    return (first_at - assigned_at).total_seconds() * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--starts", type=int, default=20)
    p.add_argument("--trials", type=int, default=60)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp) / "master", f"sqlite:///{tmp}/master/master.db").start()
        agent = AgentProcess(master, "bench-agent", 4, Path(tmp) / "agent").start()
        try:
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {login(master.url)}"
            wait_for(lambda: s.get(f"{master.url}/api/v1/agents").json()["agents"], 60, "the agent")
            single = {"name": "start", "entrypoint": "python3 start.py", "hyperparameters": {},
                      "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
            latencies = []
            for i in range(args.starts + 1):
                exp_id = create(s, master.url, single)
                wait_done(s, master.url, exp_id)
                if i:  # the first run fills the context cache
                    latencies.append(start_latency_ms(Path(tmp) / "master" / "master.db", s, master.url, exp_id))
            print(f"start latency (assigned -> first line), {len(latencies)} warm starts: "
                  f"median {statistics.median(latencies):.0f} ms, min {min(latencies):.0f} ms, "
                  f"max {max(latencies):.0f} ms", flush=True)

            loop = {"name": "loop", "entrypoint": "true",
                    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
                    "searcher": {"name": "random", "metric": "loss", "max_trials": args.trials,
                                 "max_concurrent_trials": 4, "max_length": {"batches": 1}}}
            t0 = time.perf_counter()
            exp_id = create(s, master.url, loop)
            wait_done(s, master.url, exp_id)
            elapsed = time.perf_counter() - t0
            print(f"zero-length trials: {args.trials} in {elapsed:.2f}s = {args.trials / elapsed:.2f} trials/s",
                  flush=True)
        finally:
            agent.stop()
            master.stop()
    print(f"start_ms_median={statistics.median(latencies):.1f} start_ms_max={max(latencies):.1f} "
          f"trials_per_s={args.trials / elapsed:.2f}")


if __name__ == "__main__":
    main()
