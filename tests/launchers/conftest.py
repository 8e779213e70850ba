"""Helpers for the launcher tests: a gang's info files, a launcher run, a process that must go."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

# MODE=fail: rank 1 exits 3; MODE=hang: rank 1 exits 4 and rank 2 ignores SIGTERM (only SIGKILL
# stops it). Rank 1 fails once every rank has started (its pid file is there), so each of them is
# one the launcher must stop; the file is written after the rank has set up its signals.
WORKER = """\
import glob, os, signal, sys, time
rank = int(os.environ["RANK"])
mode = os.environ.get("MODE", "ok")
if mode == "hang" and rank == 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(f".pid-{rank}.tmp", "w").write(str(os.getpid()))
os.replace(f".pid-{rank}.tmp", f"pid-{rank}")  # whole: the test reads it after a SIGTERM may have come
print("env", {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT", "DET_CHIEF_IP", "DET_DIST_PORTS")}, sys.argv[1:], flush=True)
if mode in ("fail", "hang") and rank == 1:
    deadline = time.monotonic() + 30
    while len(glob.glob("pid-*")) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3 if mode == "fail" else 4)
if mode in ("fail", "hang"):
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


def own_python(tmp_path: Path) -> str:
    """This test's own path to the venv's interpreter (the venv reached through a link in ``tmp_path``).

    DeepSpeed's runner, when it is stopped, kills its gang with ``pkill -f "PYTHON -u -m
    deepspeed.launcher.launch"`` (PYTHON: its own sys.executable) on every container. On one machine
    that also kills any other DeepSpeed gang started with the same interpreter path (another xdist
    worker's test); launchers started with a path of their own match only this test's processes."""
    link = tmp_path / "venv"
    link.symlink_to(sys.prefix, target_is_directory=True)
    return str(link / "bin" / Path(sys.executable).name)


def start(module: str, args: list[str], env: dict[str, str], cwd: Path, python: str = sys.executable
          ) -> subprocess.Popen:
    return subprocess.Popen([python, "-m", module, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
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


def wait_listening(port: int, proc: subprocess.Popen, within_s: float = 60.0) -> None:
    """Until something accepts connections on 127.0.0.1:``port`` (``proc`` must not exit first)."""
    deadline = time.monotonic() + within_s
    while True:
        assert proc.poll() is None, f"exited {proc.returncode} before listening on {port}: {proc.communicate()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port} after {within_s}s"
            time.sleep(0.05)


def pids(cwd: Path) -> dict[int, int]:
    return {int(p.name.split("-")[1]): int(p.read_text()) for p in cwd.glob("pid-*")}
