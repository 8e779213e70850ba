"""Real processes for tests: a det-master on a free loopback port, det-agents, and a login.

Everything started here is stopped by the fixture that started it (process groups, so no
grandchild outlives a test). Each master gets its own port (``free_port``), data dir (the test's
``tmp_path`` or a module's ``tmp_path_factory`` dir) and database (a file there, or a PostgreSQL
database with a random name), so xdist workers never share one.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports, for a server that takes ``port`` and ``port + 1``
    (the master's proxy, a rank's second port). Below the kernel's ephemeral range (32768-60999 on
    Linux), where no outgoing connection can take ``port + 1`` between this check and the bind, as
    happened under load with ``free_port() + 1``."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 32_768 - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no run of {count} free ports found below 32768")


@contextmanager
def database_for(node, directory: Path) -> Iterator[str]:
    """An empty database for a master that serves more than one test (a module's shared cluster),
    on the backend ``node``'s markers choose (``backends_for`` in tests/conftest.py: SQLite unless the
    module says ``one_database("postgres")``): an SQLite file in ``directory``, or a new PostgreSQL
    database dropped afterwards. The per-test ``db_url`` fixture is this for one test."""
    from tests.conftest import backends_for
    from tests.support.databases import empty_database

    backends = backends_for(node)
    if len(backends) != 1:
        raise ValueError(f"{node.nodeid}: a shared master runs on one database; mark it one_database(...)")
    with empty_database(backends[0], directory) as url:
        yield url


def login(url: str, username: str = "determined", password: str = "") -> str:
    r = requests.post(f"{url}/api/v1/auth/login", json={"username": username, "password": password}, timeout=10)
    r.raise_for_status()
    return r.json()["token"]


def _stop_group(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, wait_s: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class _Managed:
    """A child process in its own process group, stopped with the whole group."""

    proc: subprocess.Popen[Any] | None = None

    def stop(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc)

    def kill9(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc, signal.SIGKILL)


class MasterProcess(_Managed):
    def __init__(self, data_dir: Path, db_url: str, *, port: int | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.join_token = secrets.token_urlsafe(24)
        token_file = data_dir / "join-token"
        token_file.write_text(self.join_token)
        token_file.chmod(0o600)
        config = {"port": self.port, "data_dir": str(data_dir), "db": {"url": db_url},
                  "security": {"join_token_file": str(token_file)},
                  "checkpoint_storage": {"type": "shared_fs", "host_path": str(data_dir / "checkpoints")},
                  **(extra or {})}
        self.config_path = data_dir / "master.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = data_dir / "master.log"
        self.proc: subprocess.Popen[Any] | None = None

    def start(self, timeout_s: float = 60.0) -> MasterProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(BIN / "det-master"), "--config", str(self.config_path)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"det-master exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/info", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"det-master did not answer /info in {timeout_s}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

class AgentProcess(_Managed):
    def __init__(self, master: MasterProcess, agent_id: str, slots: int, work_dir: Path) -> None:
        self.master, self.agent_id, self.slots, self.work_dir = master, agent_id, slots, work_dir
        self.log_path = work_dir / f"{agent_id}.log"
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> AgentProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "det-agent"), "--master", self.master.url, "--join-token-file",
             str(self.master.data_dir / "join-token"), "--agent-id", self.agent_id, "--slots", str(self.slots),
             "--work-dir", str(self.work_dir), "--hide", str(self.master.data_dir)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} "
                         f"(last: {json.dumps(last, default=str)[:500]})")
