"""The cluster a run scores against: a PostgreSQL database of its own, `det deploy local up` with
the project's det, reads of the master's REST answers (Master), and the unmodified client's ``det``
(RealDet)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
import yaml

from benchmarks.determined_client.scoreboard import Fail, Invocation, Scoreboard, wait_for
from benchmarks.determined_client.settings import ENVIRONMENT, PG_ADMIN_URL, ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def pg_database() -> Iterator[str]:
    name = f"score_{uuid.uuid4().hex[:10]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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
        if text in cmdline or text in environ:
            found.append(int(p.name))
    return found


@contextmanager
def local_cluster(work: Path, db_url: str, venv: Path, agents: int, slots: int,
                  preemption: bool | None = None) -> Iterator[str]:
    """`det deploy local up` with the project's det; yields the master's URL; `down` and a SIGKILL of
    whatever of ours still mentions the data dir afterwards. ``preemption``: the default pool's
    ``scheduler.preemption`` (None: the master's own default)."""
    data_dir = work / "cluster"
    master_config = work / "master.yaml"
    settings: dict[str, Any] = {"db": {"url": db_url}, "agent_reconnect_wait": "4s"}
    if preemption is not None:
        settings["resource_pools"] = [{"pool_name": "default",
                                       "scheduler": {"type": "priority", "preemption": preemption}}]
    master_config.write_text(yaml.safe_dump(settings))
    port = free_port()
    det = str(ROOT / ".venv" / "bin" / "det")
    env = {**os.environ, "XDG_CONFIG_HOME": str(work / "xdg")}
    up = [det, "deploy", "local", "up", "--port", str(port), "--agents", str(agents), "--slots-per-agent",
          str(slots), "--data-dir", str(data_dir), "--master-config", str(master_config),
          "--agent-environment", f"{ENVIRONMENT}={venv}"]
    try:
        proc = subprocess.run(up, capture_output=True, text=True, env=env, timeout=240)
        if proc.returncode != 0:
            raise RuntimeError(f"det deploy local up failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([det, "deploy", "local", "down", "--data-dir", str(data_dir)], capture_output=True,
                       env=env, timeout=120)
        for pid in processes_mentioning(str(data_dir)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


class Master:
    """Reads of the master's own REST answers (Determined's paths), to confirm what a command did."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()
        r = self.http.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ""}, timeout=30)
        r.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {r.json()['token']}"

    def get(self, path: str, **params: str | int) -> Any:
        r = self.http.get(f"{self.url}{path}", params=params, timeout=60)
        if r.status_code != 200:
            raise Fail(f"GET {path}: {r.status_code} {r.text[:200]}")
        return r.json()

    def status(self, path: str) -> int:
        return self.http.get(f"{self.url}{path}", timeout=60).status_code

    def experiment(self, exp_id: int) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/experiments/{exp_id}")["experiment"])

    def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"])

    def checkpoints(self, trial_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])

    def checkpoint(self, uuid_: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/checkpoints/{uuid_}")["checkpoint"])

    def metrics(self, trial_id: int, group: str) -> list[tuple[int, dict[str, Any]]]:
        """(total batches, metrics) of each report of ``group``, from Determined's streaming read."""
        r = self.http.get(f"{self.url}/api/v1/trials/metrics/trial_metrics",
                          params={"trialIds": str(trial_id), "group": group}, timeout=60)
        if r.status_code != 200:
            raise Fail(f"GET trial_metrics: {r.status_code} {r.text[:200]}")
        out = []
        for line in r.text.splitlines():
            if not line.strip():
                continue
            for m in json.loads(line).get("result", {}).get("metrics", []):
                values = m["metrics"]
                values = values.get("avg_metrics") or values.get("validation_metrics") or values
                out.append((int(m["totalBatches"]), dict(values)))
        return out

    def live_task_ids(self) -> set[str]:
        return {a["taskId"] for a in self.get("/api/v1/tasks")["allocationIdToSummary"].values()}

    def wait_state(self, exp_id: int, states: tuple[str, ...], timeout_s: float = 300) -> dict[str, Any]:
        return wait_for(lambda: (e := self.experiment(exp_id))["state"] in states and e, timeout_s,
                        f"experiment {exp_id} to reach {'/'.join(states)}", interval_s=1)

    def wait_running(self, exp_id: int, timeout_s: float = 300, run_id: int = 1) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            trials = self.trials(exp_id)
            return next((t for t in trials if t["state"] == "STATE_RUNNING" and t.get("runId", 1) >= run_id), None)
        return wait_for(running, timeout_s, f"a trial of experiment {exp_id} to run", interval_s=0.1)


class RealDet:
    """The unmodified client's ``det``, with a HOME of its own; every call is recorded for the report."""

    def __init__(self, board: Scoreboard, venv: Path, url: str, home: Path) -> None:
        self.board, self.venv, self.url = board, venv, url
        home.mkdir(parents=True, exist_ok=True)
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
        self.base.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), DET_MASTER=url,
                         PYTHONWARNINGS="ignore")

    def env(self, user: str | None = "admin", password: str = "") -> dict[str, str]:
        env = dict(self.base)
        if user is not None:
            env.update(DET_USER=user, DET_PASS=password)
        return env

    def __call__(self, *args: str, ok: bool = True, user: str | None = "admin", password: str = "",
                 input: str | None = None, timeout: float = 120,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        command = "det " + " ".join(shlex.quote(a) for a in args)
        try:
            proc = subprocess.run([str(self.venv / "bin" / "det"), *args], capture_output=True, text=True,
                                  env=self.env(user, password), timeout=timeout, input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL, cwd=cwd)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            self.board.trace.append(Invocation(command, None, out, err))
            raise Fail(f"{command}: timed out after {timeout:.0f} s") from None
        self.board.trace.append(Invocation(command, proc.returncode, proc.stdout, proc.stderr))
        if ok:
            if proc.returncode != 0:
                said = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()
                        and "password" not in line.lower() and not line.startswith(("✗", "Warning"))]
                raise Fail(f"exit {proc.returncode}: {said[-1] if said else '(no output)'}")
            if "Traceback (most recent call last)" in proc.stderr:
                raise Fail(f"traceback: {proc.stderr.strip().splitlines()[-1]}")
        return proc
