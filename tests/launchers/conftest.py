"""Helpers for the launcher tests: a gang's info files, a launcher run, a process that must go."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

WORKER = """\
import os, signal, sys, time
rank = int(os.environ["RANK"])
open(f"pid-{rank}", "w").write(str(os.getpid()))
mode = os.environ.get("MODE", "ok")
print("env", {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT", "DET_CHIEF_IP", "DET_DIST_PORTS")}, sys.argv[1:], flush=True)
if mode == "fail" and rank == 1:
    time.sleep(1)
    sys.exit(3)
if mode in ("fail", "hang"):
    if mode == "hang" and rank == 2:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "hang" and rank == 1:
        time.sleep(1)
        sys.exit(4)
    time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_info(path: Path, *, rank: int = 0, counts: tuple[int, ...] = (3,), ports: dict | None = None,
               ssh_key: str | None = None) -> Path:
    """cluster.json, rendezvous.json and ports.json of container ``rank`` of a gang on 127.0.0.1."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "cluster.json").write_text(json.dumps({
        "master_url": "http://127.0.0.1:1", "cluster_id": "c", "agent_id": f"agent-{rank}",
        "slot_ids": list(range(counts[rank])), "task_id": "t", "allocation_id": "t.1", "session_token": "tok",
        "task_type": "TRIAL"}))
    ports = ports or {}
    rdv = {"container_addrs": ["127.0.0.1"] * len(counts), "container_rank": rank,
           "container_slot_counts": list(counts)}
    extra = {"chief_port": ports.get("chief", 0), "dist_ports": ports.get("dist", []),
             "ssh_ports": ports.get("ssh", []), "ssh_key_file": None}
    if ssh_key is not None:
        (path / "ssh").mkdir(exist_ok=True)
        (path / "ssh/id_ed25519").write_text(ssh_key)
        (path / "ssh/id_ed25519").chmod(0o600)
        extra["ssh_key_file"] = "ssh/id_ed25519"
    (path / "rendezvous.json").write_text(json.dumps(rdv))
    (path / "ports.json").write_text(json.dumps(extra))
    return path


def gang_ports(containers: int) -> dict:
    return {"chief": free_port(), "dist": [free_port(), free_port()],
            "ssh": [0] + [free_port() for _ in range(containers - 1)]}


def launcher_env(info: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    if info is not None:
        env["DET_INFO_DIR"] = str(info)
    env.update(extra)
    return env


def start(module: str, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def pids(cwd: Path) -> dict[int, int]:
    return {int(p.name.split("-")[1]): int(p.read_text()) for p in cwd.glob("pid-*")}
