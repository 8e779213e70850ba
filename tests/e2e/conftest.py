"""A local cluster started the way a user starts it: `det deploy local up`, torn down by `down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "spirals"


def det(*args: str, env: dict | None = None, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / "det"), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"det {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def kill_if_alive(pid: int) -> None:
    """SIGKILL; a process that is already gone (a sandboxed task whose namespace went down with
    its launcher shell) is what we wanted."""
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def processes_mentioning(text: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (p / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (text in cmdline or text in environ) and pid_alive(int(p.name)):
            found.append(int(p.name))
    return found


class LocalCluster:
    def __init__(self, data_dir: Path, port: int, db_url: str, agents: int, slots: int,
                 environments: dict[str, Path] | None = None) -> None:
        """``environments``: task environments (name -> venv dir or interpreter) every agent offers."""
        self.data_dir, self.port, self.agents, self.slots = data_dir, port, agents, slots
        self.environments = dict(environments or {})
        self.url = f"http://127.0.0.1:{port}"
        self.env = {"DET_MASTER": self.url, "XDG_CONFIG_HOME": str(data_dir / "xdg")}
        self.master_config = data_dir.parent / f"{data_dir.name}-master.yaml"
        # A preempted trial checkpoints at its next checkpoint boundary (100 batches in the spirals
        # example); on a loaded machine that can take longer than 30 s, and a trial killed for
        # ignoring its preemption redoes the batches since its last checkpoint.
        self.master_config.write_text(yaml.safe_dump({"db": {"url": db_url}, "agent_reconnect_wait": "4s",
                                                      "preemption_timeout": "300s"}))

    def up(self) -> subprocess.CompletedProcess:
        return det("deploy", "local", "up", "--port", str(self.port), "--agents", str(self.agents),
                   "--slots-per-agent", str(self.slots), "--data-dir", str(self.data_dir),
                   "--master-config", str(self.master_config),
                   *(a for name, path in self.environments.items() for a in ("--agent-environment", f"{name}={path}")),
                   env=self.env, timeout=180)

    def down(self) -> subprocess.CompletedProcess:
        return det("deploy", "local", "down", "--data-dir", str(self.data_dir), env=self.env, timeout=120)

    def pids(self) -> dict:
        return json.loads((self.data_dir / "pids.json").read_text())

    def det(self, *args: str, **kw) -> subprocess.CompletedProcess:  # noqa: ANN003
        return det(*args, env=self.env, **kw)


@pytest.fixture
def local_cluster(db_url, tmp_path):
    clusters: list[LocalCluster] = []

    def make(agents: int = 2, slots: int = 2, environments: dict[str, Path] | None = None) -> LocalCluster:
        c = LocalCluster(tmp_path / "cluster", free_port(), db_url, agents, slots, environments)
        clusters.append(c)
        c.up()
        return c

    yield make
    for c in clusters:
        det("deploy", "local", "down", "--data-dir", str(c.data_dir), env=c.env, check=False, timeout=120)
        for pid in processes_mentioning(str(c.data_dir)):
            kill_if_alive(pid)


@pytest.fixture(scope="session")
def determined_venv() -> Path:
    """The real determined==0.38.1 client's venv (built once, cached under .cache/)."""
    from tests.support.determined_venv import ensure_determined_venv

    return ensure_determined_venv()


@pytest.fixture(scope="session")
def determined_cli(determined_venv: Path) -> Path:
    """The real 0.38.1 ``det``."""
    return determined_venv / "bin" / "det"
