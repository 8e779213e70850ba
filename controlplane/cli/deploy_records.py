"""What `det deploy local up` keeps about the processes it started, in the data dir.

`<data-dir>/pids.json` (`Record`) names the master and the agents with their start times and the
cluster's id (see `deploy_procs.py` for how a process is proven to be the cluster's), and
`stop_group_pids` stops their process groups (SIGTERM, then SIGKILL after `STOP_GRACE_S`). Each
process writes its output to `<data-dir>/logs/`; `rotate_log` keeps up to `LOG_KEEP` earlier logs
of a process that starts again, and `log_tail` shows the end of one. The commands that use them:
`deploy.py`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.cli import deploy_procs as procs

STOP_GRACE_S = 15.0
PIDS = "pids.json"
LOG_KEEP = 5  # old logs kept per process: master.log.1 (the last run) ... master.log.5

pid_alive = procs.pid_alive


# ---- stopping process groups ----------------------------------------------------------------
def _signal_group(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if pid_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if pid_alive(p)]
    return left


def stop_group_pids(pids: list[int], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM each process group, wait, SIGKILL what is left; returns the ones that needed a kill."""
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    stubborn = _wait_gone(pids, grace_s)
    for pid in stubborn:
        _signal_group(pid, signal.SIGKILL)
    _wait_gone(stubborn, 5.0)
    return stubborn


def leftover_processes(data_dir: Path) -> list[int]:
    """Processes of this cluster no pid file names (trials whose agent died, agents the `local`
    provider started): those whose environment carries this cluster's id."""
    cid = procs.cluster_id(data_dir, create=False)
    return procs.processes_of_cluster(cid) if cid else []


# ---- the record of a cluster ----------------------------------------------------------------
@dataclass
class Record:
    """`pids.json`: `master` and `agents` are pids (agent i is `local-agent-i`), `startTimes`
    maps each pid to its start time, `clusterId` is the id in their environment,
    `agentEnvironments` the task environments (`NAME=PATH`) every agent offers."""

    url: str
    cluster_id: str
    master: int | None = None
    agents: list[int] = field(default_factory=list)
    start_times: dict[int, int] = field(default_factory=dict)
    slots_per_agent: int = 1
    # `--agent-environment NAME=PATH` (absolute paths), passed to every agent as `--environment`.
    agent_environments: list[str] = field(default_factory=list)

    def ours(self, pid: int | None) -> bool:
        return isinstance(pid, int) and procs.is_ours(pid, self.start_times.get(pid), self.cluster_id)

    def note(self, pid: int) -> None:
        started = procs.start_time(pid)
        if started is not None:
            self.start_times[pid] = started

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "clusterId": self.cluster_id, "master": self.master, "agents": self.agents,
                "startTimes": {str(p): t for p, t in self.start_times.items()},
                "slotsPerAgent": self.slots_per_agent, "agentEnvironments": self.agent_environments}


def read_pids(data_dir: Path) -> Record | None:
    try:
        data = json.loads((data_dir / PIDS).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    raw_starts = data.get("startTimes")
    starts: dict[str, Any] = raw_starts if isinstance(raw_starts, dict) else {}
    master = data.get("master")
    slots = data.get("slotsPerAgent")
    envs = data.get("agentEnvironments")
    return Record(
        url=str(data.get("url") or ""),
        cluster_id=str(data.get("clusterId") or procs.cluster_id(data_dir, create=False) or ""),
        master=master if isinstance(master, int) and not isinstance(master, bool) else None,
        agents=[p for p in data.get("agents") or [] if isinstance(p, int) and not isinstance(p, bool)],
        start_times={int(p): t for p, t in starts.items() if str(p).isdigit() and isinstance(t, int)},
        slots_per_agent=slots if isinstance(slots, int) and slots >= 0 else 1,
        agent_environments=[e for e in envs if isinstance(e, str)] if isinstance(envs, list) else [])


def write_pids(data_dir: Path, record: Record) -> None:
    procs.write_private(data_dir / PIDS, json.dumps(record.to_json(), indent=2))


# ---- logs -----------------------------------------------------------------------------------
def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"(no log at {path})"
    return "\n".join(f"  | {line}" for line in text) or "  | (empty)"


def rotate_log(path: Path, keep: int | None = None) -> None:
    """`path` becomes `path.1`, `path.1` becomes `path.2`, ... and `path.<keep>` is dropped; each
    kept file 0600. Only for a log whose writer is gone (the process is about to start again)."""
    keep = LOG_KEEP if keep is None else keep
    if keep < 1 or not path.exists():
        return
    for k in range(keep, 0, -1):
        src = path if k == 1 else path.with_name(f"{path.name}.{k - 1}")
        dst = path.with_name(f"{path.name}.{k}")
        if src.exists():
            os.replace(src, dst)
            os.chmod(dst, 0o600)


def _agent_log(data_dir: Path, i: int) -> Path:
    return data_dir / "logs" / f"agent-{i}.log"
