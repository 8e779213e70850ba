"""A local cluster started the way a user starts it: `det deploy local up`, torn down by `down`.

- ``local_cluster``: ``local_cluster(agents, slots, environments)`` starts a cluster of the test's
  own (its database: ``db_url``, so on the module's backend).
- ``shared_local_cluster``: the same call, answered with the module's cluster of that shape, started
  by the first test that asks and stopped after the module (its database: ``database_for``, on the
  module's backend). A module whose scenarios do not disturb each other (each submits and ends its
  own experiments and tasks; none kills an agent or the master, or asserts on what the whole cluster
  lists) says ``local_cluster = shared_local_cluster`` and ``pytest.mark.xdist_group`` (one worker
  runs the module, so one cluster serves it). Each test gets its own client config dir
  (``XDG_CONFIG_HOME`` at ``tmp_path/cluster/xdg``, where a cluster of its own keeps it), and after
  it, what it left running is stopped so that the next test finds the cluster idle. A test in such
  a module that needs a cluster of its own says ``pytest.mark.usefixtures("own_cluster")``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.cluster import database_for, free_port, login
from tests.support.deadline import bounded

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "spirals"

# Appended to a copy of examples/spirals/model.py by slow_first_run_example (SECONDS: per batch).
SLOW_FIRST_RUN = """

import time as _time

from controlplane import core as _core

_plain_mlp = mlp


def mlp(*args, **kwargs):
    model = _plain_mlp(*args, **kwargs)
    _info = _core.get_cluster_info()
    if _info is None or not _info.latest_checkpoint:
        model.register_forward_pre_hook(lambda *_: _time.sleep(SECONDS))
    return model
"""


def slow_first_run_example(directory: Path, seconds_per_batch: float) -> Path:
    """A copy of examples/spirals (in ``directory``) whose trial spends at least ``seconds_per_batch``
    on every batch of its first run, the one with no checkpoint to resume from: that run is still
    going when a test acts on it after a checkpoint (preempts it, interrupts its spot instance), however
    fast the machine. A run that resumed from a checkpoint has nothing left to outlast and trains at
    full speed, so a scenario does not wait out a deliberately slow second run."""
    context = directory / "spirals-slow-first-run"
    shutil.copytree(EXAMPLE, context, ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    with (context / "model.py").open("a") as f:
        f.write(SLOW_FIRST_RUN.replace("SECONDS", repr(float(seconds_per_batch))))
    return context


def det(*args: str, env: dict | None = None, timeout: float = 300, check: bool = True,
        base_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``det`` with ``env`` over ``base_env`` (default: this process's environment, a test's
    monkeypatched variables included)."""
    proc = subprocess.run([str(BIN / "det"), *args], capture_output=True, text=True, timeout=bounded(timeout),
                          env={**(os.environ if base_env is None else base_env), **(env or {})})
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
                 environments: dict[str, Path] | None = None, storage_choices: list[dict] | None = None) -> None:
        """``environments``: task environments (name -> venv dir or interpreter) every agent offers;
        ``storage_choices``: checkpoint storage places the admin offers besides the cluster's default
        and ``scratch`` (a second shared_fs, at ``self.scratch``), which every test cluster has."""
        self.data_dir, self.port, self.agents, self.slots = data_dir, port, agents, slots
        self.environments = dict(environments or {})
        self.url = f"http://127.0.0.1:{port}"
        self.env = {"DET_MASTER": self.url, "XDG_CONFIG_HOME": str(data_dir / "xdg")}
        self.master_config = data_dir.parent / f"{data_dir.name}-master.yaml"
        # The preemption timeout is the master's default, Determined's hour: a preempted trial
        # checkpoints at its next boundary (100 batches in the spirals example), which on a loaded
        # machine can take minutes.
        self.scratch = data_dir.parent / f"{data_dir.name}-scratch"
        choices = [{"name": "scratch", "type": "shared_fs", "host_path": str(self.scratch)}, *(storage_choices or [])]
        self.master_config.write_text(yaml.safe_dump({"db": {"url": db_url}, "agent_reconnect_wait": "4s",
                                                      "checkpoint_storage_choices": choices}))

    def up(self, base_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """``base_env``: the environment the master and agents start with (default: this process's)."""
        return det("deploy", "local", "up", "--port", str(self.port), "--agents", str(self.agents),
                   "--slots-per-agent", str(self.slots), "--data-dir", str(self.data_dir),
                   "--master-config", str(self.master_config),
                   *(a for name, path in self.environments.items() for a in ("--agent-environment", f"{name}={path}")),
                   env=self.env, timeout=180, base_env=base_env)

    def down(self) -> subprocess.CompletedProcess:
        return det("deploy", "local", "down", "--data-dir", str(self.data_dir), env=self.env, timeout=120)

    def pids(self) -> dict:
        return json.loads((self.data_dir / "pids.json").read_text())

    def det(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return det(*args, env=self.env, **kw)

    def for_test(self, tmp_path: Path) -> LocalCluster:
        """This cluster as one test of a module that shares it sees it: the test's own client config
        dir, where a cluster of its own would keep it (``tmp_path/cluster/xdg``)."""
        view = copy.copy(self)
        view.env = {**self.env, "XDG_CONFIG_HOME": str(tmp_path / "cluster" / "xdg")}
        return view


def stop_cluster(c: LocalCluster) -> None:
    """`down`, then SIGKILL whatever still mentions its data dir."""
    det("deploy", "local", "down", "--data-dir", str(c.data_dir), env=c.env, check=False, timeout=120)
    for pid in processes_mentioning(str(c.data_dir)):
        kill_if_alive(pid)


@pytest.fixture
def local_cluster(db_url, tmp_path):
    clusters: list[LocalCluster] = []

    def make(agents: int = 2, slots: int = 2, environments: dict[str, Path] | None = None,
             storage_choices: list[dict] | None = None) -> LocalCluster:
        c = LocalCluster(tmp_path / "cluster", free_port(), db_url, agents, slots, environments, storage_choices)
        clusters.append(c)
        c.up()
        return c

    yield make
    for c in clusters:
        stop_cluster(c)


ENDED_TASK = "STATE_TERMINATED"
LIVE_EXPERIMENT = ("STATE_ACTIVE", "STATE_PAUSED")  # STOPPING_* end by themselves
TASK_KINDS = ("command", "shell", "notebook", "tensorboard")


def settle(cluster: LocalCluster, timeout_s: float = 60.0) -> bool:
    """Kills the experiments and tasks a test left running and waits until no allocation is live:
    True once the cluster is idle, False if it is not in ``timeout_s`` (or does not answer)."""
    try:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {login(cluster.url, 'admin')}"
        for e in s.get(f"{cluster.url}/api/v1/experiments", timeout=30).json()["experiments"]:
            if e["state"] in LIVE_EXPERIMENT:
                s.post(f"{cluster.url}/api/v1/experiments/{e['id']}/kill", timeout=30)
        for kind in TASK_KINDS:
            for t in s.get(f"{cluster.url}/api/v1/{kind}s", timeout=30).json()[f"{kind}s"]:
                if t["state"] != ENDED_TASK:
                    s.post(f"{cluster.url}/api/v1/{kind}s/{t['id']}/kill", timeout=30)
        deadline = time.monotonic() + timeout_s
        while s.get(f"{cluster.url}/api/v1/tasks", timeout=30).json()["allocationIdToSummary"]:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True
    except (requests.RequestException, KeyError, ValueError):
        return False


class SharedClusters:
    """The clusters a module's tests share: one per shape (agents, slots, environments), started when
    a test first asks for it, each with its own data dir and database on the module's backend."""

    def __init__(self, module: pytest.Module, root: Path) -> None:
        self.module, self.root = module, root
        # What the processes start with, whichever test starts them: not a test's monkeypatched variables.
        self.base_env = dict(os.environ)
        self.clusters: dict[tuple, tuple[LocalCluster, ExitStack]] = {}
        self.started = 0

    def get(self, agents: int, slots: int, environments: dict[str, Path] | None) -> LocalCluster:
        key = (agents, slots, tuple(sorted((name, str(path)) for name, path in (environments or {}).items())))
        if key not in self.clusters:
            self.started += 1
            here = self.root / f"cluster-{self.started}"
            here.mkdir()
            with ExitStack() as stack:
                db_url = stack.enter_context(database_for(self.module, here / "db"))
                c = LocalCluster(here / "cluster", free_port(), db_url, agents, slots, environments)
                stack.callback(stop_cluster, c)
                c.up(self.base_env)
                self.clusters[key] = (c, stack.pop_all())
        return self.clusters[key][0]

    def after_test(self, cluster: LocalCluster) -> None:
        """Leaves the cluster idle for the next test; one that cannot be made idle is stopped (the
        next test that asks for that shape starts a new one)."""
        if settle(cluster):
            return
        for key, (c, stack) in list(self.clusters.items()):
            if c is cluster:
                del self.clusters[key]
                stack.close()

    def stop_all(self) -> None:
        for _, stack in self.clusters.values():
            stack.close()
        self.clusters.clear()


@pytest.fixture(scope="module")
def _shared_clusters(request, tmp_path_factory) -> Iterator[SharedClusters]:
    clusters = SharedClusters(request.node, tmp_path_factory.mktemp("shared-clusters"))
    try:
        yield clusters
    finally:
        clusters.stop_all()


@pytest.fixture
def own_cluster() -> None:
    """A flag: a test that asks for it (``pytest.mark.usefixtures("own_cluster")``) in a module that
    shares its cluster gets one of its own from ``shared_local_cluster``."""


@pytest.fixture
def shared_local_cluster(request, _shared_clusters, tmp_path):
    """``local_cluster``'s call, answered with the module's cluster of that shape (see the module
    docstring); a test that asks for ``own_cluster`` gets a new one, stopped after it."""
    used: list[LocalCluster] = []
    own = ExitStack()

    def make(agents: int = 2, slots: int = 2, environments: dict[str, Path] | None = None) -> LocalCluster:
        if "own_cluster" in request.fixturenames:
            db_url = own.enter_context(database_for(request.node, tmp_path / "db"))
            c = LocalCluster(tmp_path / "cluster", free_port(), db_url, agents, slots, environments)
            own.callback(stop_cluster, c)
            c.up()
            return c
        c = _shared_clusters.get(agents, slots, environments)
        if c not in used:
            used.append(c)
        return c.for_test(tmp_path)

    with own:
        yield make
        for c in used:
            _shared_clusters.after_test(c)


@pytest.fixture(scope="session")
def determined_venv() -> Path:
    """The real determined==0.38.1 client's venv (built once, cached under .cache/)."""
    from tests.support.determined_venv import ensure_determined_venv

    return ensure_determined_venv()


@pytest.fixture(scope="session")
def determined_cli(determined_venv: Path) -> Path:
    """The real 0.38.1 ``det``."""
    return determined_venv / "bin" / "det"
