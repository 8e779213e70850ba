"""`det deploy local up|down`: a whole cluster (one master, N agents) as local processes.

`<data-dir>/pids.json` records each process with its start time and the cluster's id, which
`up` also puts in their environment (`DET_LOCAL_CLUSTER_ID`, see `deploy_procs.py`). `up` on a
recorded cluster whose master answers restarts the agents that died and otherwise says
"already running". On one whose master died (a crash) but some of whose agents live, it starts
only the master, from the same `master.yaml` (port, data dir, database), and leaves the agents
alone: they reconnect and keep their tasks. `up` never stops a process: not one it did not
start, not a recorded one that still runs. With something else on the master's port it says
which process holds it and exits non-zero, `pids.json` untouched; `pids.json` is replaced
(atomically, 0600) only once `up` has started something. Everything runs in its own session
(process group) with its output in `<data-dir>/logs/`, so `down` can stop each group (SIGTERM,
then SIGKILL after 15 s) even after `up` has exited; `down` touches only processes it can prove
are this cluster's. A log of a process `up` starts again is rotated first (`master.log` becomes
`master.log.1`, ... up to `LOG_KEEP` old ones), so a crash's log survives the restart. A failed
`up` stops what it started (only that) and shows the tail of the log of the process that failed.

The data dir holds secrets (the join token, the master's config and SQLite database), so it is
0700 and the files `up` writes there are 0600.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from controlplane.cli import deploy_procs as procs
from controlplane.cli.errors import CliError

MASTER_START_TIMEOUT_S = 60.0
AGENTS_CONNECT_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
RUNNING_MASTER_WAIT_S = 15.0  # a recorded master that runs may still be starting
PIDS = "pids.json"
AGENT_ID = "local-agent-{}"
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


def ensure_join_token(data_dir: Path) -> Path:
    """`<data-dir>/join-token`, created once (mode 0600) and reused so agents keep working."""
    path = data_dir / "join-token"
    if path.exists() and path.read_text().strip():
        os.chmod(path, 0o600)
        return path
    procs.write_private(path, secrets.token_urlsafe(32) + "\n")
    return path


# ---- configuration --------------------------------------------------------------------------
def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "checkpoint_storage":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_user_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise CliError(f"cannot read master config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise CliError(f"master config {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CliError(f"master config {path} must be a mapping")
    return data


def master_config(data_dir: Path, port: int, token_file: Path, user_cfg: dict[str, Any]) -> dict[str, Any]:
    defaults = {
        "port": port,
        "data_dir": str(data_dir),
        "db": {"url": f"sqlite:///{data_dir / 'master.db'}"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(data_dir / "checkpoints")},
    }
    cfg = deep_merge(defaults, user_cfg)
    cfg["port"] = port
    raw_security = cfg.get("security")
    security: dict[str, Any] = raw_security if isinstance(raw_security, dict) else {}
    cfg["security"] = {**security, "join_token_file": str(token_file)}
    cfg["security"].pop("join_token", None)
    return cfg


def autoscale_config(max_agents: int, slots: int, idle_period: str) -> dict[str, Any]:
    """The default pool served by the `local` provider: agents start on demand and go when idle."""
    return {"autoscaler_tick": "1s", "resource_pools": [{"pool_name": "default", "provider": {
        "type": "local", "instance_type": "local", "min_instances": 0, "max_instances": max_agents,
        "slots_per_instance": slots, "max_idle_agent_period": idle_period, "max_agent_starting_period": "2m"}}]}


def agent_environments(specs: list[str]) -> list[str]:
    """`--agent-environment NAME=PATH` options with absolute paths (a restarted agent may start
    from another directory); the agent itself checks the rest when it starts."""
    out: list[str] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CliError(f"--agent-environment {spec!r}: expected NAME=PATH")
        out.append(f"{name}={Path(path).expanduser().absolute()}")
    return out


# ---- starting processes ---------------------------------------------------------------------
def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"(no log at {path})"
    return "\n".join(f"  | {line}" for line in text) or "  | (empty)"


def console_command(name: str, module: str) -> list[str]:
    """The console script next to this Python, else `python -m module`."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def info_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        return requests.get(f"{url}/info", timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


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


def _spawn(cmd: list[str], log_path: Path, cid: str) -> subprocess.Popen[Any]:
    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    rotate_log(log_path)
    env = {**os.environ, procs.CLUSTER_ENV: cid}
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        try:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True, env=env)
        except OSError as e:
            raise CliError(f"cannot start {cmd[0]}: {e.strerror}") from None


def _agent_log(data_dir: Path, i: int) -> Path:
    return data_dir / "logs" / f"agent-{i}.log"


def _spawn_agent(data_dir: Path, record: Record, i: int) -> subprocess.Popen[Any]:
    agent_cmd = console_command("det-agent", "agent_image.agent.main")
    return _spawn([*agent_cmd, "--master", record.url, "--join-token-file", str(data_dir / "join-token"),
                   "--agent-id", AGENT_ID.format(i), "--slots", str(record.slots_per_agent),
                   "--work-dir", str(data_dir / "agents" / str(i)), "--hide", str(data_dir),
                   *(arg for spec in record.agent_environments for arg in ("--environment", spec))],
                  _agent_log(data_dir, i), record.cluster_id)


def _wait(what: str, check: Callable[[], bool], failed: Callable[[], str | None], timeout_s: float) -> None:
    """Poll `check` with progress dots on stderr; `failed` returns a reason to give up early."""
    print(f"Waiting for {what}", end="", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout_s
    next_dot = time.monotonic() + 1.0
    try:
        while True:
            if check():
                return
            reason = failed()
            if reason:
                raise CliError(reason)
            if time.monotonic() > deadline:
                raise CliError(f"timed out after {timeout_s:.0f}s waiting for {what}")
            if time.monotonic() >= next_dot:
                print(".", end="", file=sys.stderr, flush=True)
                next_dot += 1.0
            time.sleep(0.2)
    finally:
        print("", file=sys.stderr, flush=True)


def _connected_agents(url: str) -> set[str] | None:
    """Ids of connected agents, as user `determined`; None if the master cannot be asked."""
    from controlplane.cli.session import Session

    try:
        agents = Session(url, None, env={}).get("/api/v1/agents").get("agents") or []
    except CliError:
        return None
    return {str(a.get("id")) for a in agents if isinstance(a, dict) and a.get("connected", True)}


def _wait_for_agents(data_dir: Path, url: str, started: dict[int, subprocess.Popen[Any]],
                     master_failed: Callable[[], str | None], kept: dict[int, int] | None = None,
                     record: Record | None = None) -> None:
    """Until agents `started` (index -> process) and `kept` (index -> pid of a recorded agent left
    running, which reconnects by itself) are connected, or one of them or the master exits."""
    kept = kept or {}
    wanted = {AGENT_ID.format(i) for i in [*started, *kept]}
    unverifiable: list[bool] = []

    def all_connected() -> bool:
        ids = _connected_agents(url)
        if ids is None:
            unverifiable.append(True)
            return len(unverifiable) > 25  # cannot log in as `determined`: stop asking
        return wanted <= ids

    def agent_failed() -> str | None:
        reason = master_failed()
        if reason:
            return reason
        for i, a in started.items():
            if a.poll() is not None:
                path = _agent_log(data_dir, i)
                return f"agent {AGENT_ID.format(i)} exited with status {a.returncode}; {path}:\n{log_tail(path)}"
        for i, pid in kept.items():
            if record is not None and not record.ours(pid):
                path = _agent_log(data_dir, i)
                return f"agent {AGENT_ID.format(i)} (pid {pid}) exited; {path}:\n{log_tail(path)}"
        return None

    _wait(f"{len(wanted)} agent(s) to connect", all_connected, agent_failed, AGENTS_CONNECT_TIMEOUT_S)
    if len(unverifiable) > 25:
        print("Warning: could not log in as 'determined' to check that the agents connected.", file=sys.stderr)


# ---- up -------------------------------------------------------------------------------------
def _restart_dead_agents(data_dir: Path, record: Record, master_restarted: bool = False) -> int:
    """The master answers: start again each recorded agent that is no longer running; after a
    restart of the master, also wait for the agents left running to reconnect."""
    dead = [i for i, pid in enumerate(record.agents) if not record.ours(pid)]
    if not dead and not master_restarted:
        print(f"already running at {record.url}")
        print(f"export DET_MASTER={record.url}")
        return 0
    started: dict[int, subprocess.Popen[Any]] = {}
    for i in dead:
        print(f"Agent {AGENT_ID.format(i)} (pid {record.agents[i]}) is not running; the end of "
              f"{_agent_log(data_dir, i)}:\n{log_tail(_agent_log(data_dir, i), 10)}", file=sys.stderr)
        proc = _spawn_agent(data_dir, record, i)
        started[i] = proc
        record.start_times.pop(record.agents[i], None)
        record.agents[i] = proc.pid
        record.note(proc.pid)
        write_pids(data_dir, record)
    kept = {i: pid for i, pid in enumerate(record.agents) if i not in started} if master_restarted else {}
    master = record.master

    def master_failed() -> str | None:
        return None if record.ours(master) else f"the master (pid {master}) exited"

    try:
        _wait_for_agents(data_dir, record.url, started, master_failed, kept, record)
    except CliError as e:
        raise CliError(f"{e.message}\nThe rest of the cluster is still running; "
                       "`det deploy local down` stops it.") from None
    for i, proc in started.items():
        print(f"Restarted agent {AGENT_ID.format(i)} (pid {proc.pid})")
    for i, pid in kept.items():
        print(f"Agent {AGENT_ID.format(i)} (pid {pid}) kept running and reconnected")
    print(f"export DET_MASTER={record.url}")
    return 0


def _port_taken(host: str, port: int) -> str | None:
    """Why `port` cannot be the master's (bound at `host`): None when it is free."""
    if port_free("0.0.0.0" if host in ("0.0.0.0", "::") else _master_host({"host": host})[1], port):
        return None
    holders = procs.listening_pids(port)
    by = f" by pid {', '.join(map(str, holders))}" if holders else " by another process"
    return f"port {port} is already in use{by}"


def _master_host(user_cfg: dict[str, Any]) -> tuple[str, str]:
    """(the address the master binds, the one to reach it at)."""
    host = str(user_cfg.get("host") or "127.0.0.1")
    return host, "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host


def _restart_master(args: argparse.Namespace, data_dir: Path, record: Record, survivors: list[int]) -> int:
    """The recorded master is dead, `survivors` of the cluster live: start only the master, from
    the cluster's own `master.yaml`, and leave every running process alone (agents reconnect to
    the new master and keep their tasks). Refuses, stopping nothing and keeping `pids.json`, when
    it cannot start the master as it was."""
    config_path = data_dir / "master.yaml"
    nothing_done = (f"Nothing was stopped and {data_dir / PIDS} is unchanged; "
                    f"`det deploy local down --data-dir {data_dir}` stops the cluster.")
    try:
        cfg = yaml.safe_load(config_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot restart the master of the cluster in {data_dir}: {config_path}: {e}\n"
                       f"{nothing_done}") from None
    port = cfg.get("port") if isinstance(cfg, dict) else None
    if not isinstance(port, int):
        raise CliError(f"cannot restart the master of the cluster in {data_dir}: {config_path} names no port\n"
                       f"{nothing_done}")
    if args.port and args.port != port:
        raise CliError(f"--port {args.port}: the cluster in {data_dir} runs its master on port {port}, and "
                       f"its agents (pids {', '.join(map(str, survivors))}) still run.\n{nothing_done}")
    host, _ = _master_host(cfg)
    taken = _port_taken(host, port)
    if taken:
        raise CliError(f"the master of the cluster in {data_dir} (pid {record.master}) is not running, and its "
                       f"{taken}: a master started by hand? `up` restarts the master only on its own "
                       f"port and stops no process it did not start.\n{nothing_done}")
    if args.master_config or args.autoscale or args.agent_environment:
        print(f"Note: the cluster's {config_path} and recorded agents are reused as they are; "
              "`det deploy local down` first to start it with new options.", file=sys.stderr)
    print(f"The master (pid {record.master}) of the cluster in {data_dir} is not running: starting only the "
          f"master; its running processes (pids {', '.join(map(str, survivors))}) are left alone.",
          file=sys.stderr)
    previous = (data_dir / PIDS).read_bytes()
    master_log = data_dir / "logs" / "master.log"
    master = _spawn([*console_command("det-master", "controlplane.master.main"), "--config", str(config_path)],
                    master_log, record.cluster_id)
    if record.master is not None:
        record.start_times.pop(record.master, None)
    record.master = master.pid
    record.note(master.pid)
    write_pids(data_dir, record)

    def master_failed() -> str | None:
        if master.poll() is not None:
            return f"the master exited with status {master.returncode}; {master_log}:\n{log_tail(master_log)}"
        return None

    try:
        _wait(f"the master at {record.url}", lambda: info_ok(record.url, 1.0), master_failed,
              MASTER_START_TIMEOUT_S)
    except (CliError, KeyboardInterrupt) as e:
        stop_group_pids([master.pid])
        master.poll()
        procs.write_private(data_dir / PIDS, previous.decode())
        if isinstance(e, KeyboardInterrupt):
            raise
        raise CliError(f"{e.message}\nStopped the master just started (pid {master.pid}); the rest of the "
                       f"cluster was left running.") from None
    print(f"Restarted the master (pid {master.pid}) at {record.url}; logs in {data_dir / 'logs'}")
    return _restart_dead_agents(data_dir, record, master_restarted=True)


def _master_answers(url: str, timeout_s: float) -> bool:
    """Whether a running master answers within `timeout_s` (one that is still starting may)."""
    deadline = time.monotonic() + timeout_s
    while not info_ok(url, 1.0):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def cmd_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).expanduser().resolve()
    existing = read_pids(data_dir)
    if existing:
        if existing.ours(existing.master):
            if _master_answers(existing.url, RUNNING_MASTER_WAIT_S):
                return _restart_dead_agents(data_dir, existing)
            raise CliError(f"the master of the cluster in {data_dir} (pid {existing.master}) runs but does not "
                           f"answer at {existing.url}; nothing was stopped. Wait for it, or stop the cluster "
                           f"with `det deploy local down --data-dir {data_dir}`.")
        survivors = sorted({*(p for p in existing.agents if existing.ours(p)), *leftover_processes(data_dir)})
        if survivors:
            return _restart_master(args, data_dir, existing, survivors)
        # Nothing of it runs: start afresh; pids.json is replaced once the new master is started.

    if args.agents < 0 or args.slots_per_agent < 0:
        raise CliError("--agents and --slots-per-agent must not be negative")
    environments = agent_environments(args.agent_environment)
    if environments and args.autoscale:
        raise CliError("--agent-environment is for the agents `up` starts; with --autoscale the master starts "
                       "them, and they offer only the 'default' environment")
    user_cfg = load_user_config(args.master_config)
    port = args.port or user_cfg.get("port") or 8080
    if not isinstance(port, int) or not 0 < port < 65536:
        raise CliError(f"invalid port {port!r}")
    host, connect_host = _master_host(user_cfg)
    url = f"http://{connect_host}:{port}"
    taken = _port_taken(host, port)
    if taken:
        raise CliError(f"{taken}; pick another with --port")

    procs.private_dir(data_dir)
    for sub in ("logs", "agents"):
        procs.private_dir(data_dir / sub)
    cid = procs.cluster_id(data_dir, create=True) or ""
    token_file = ensure_join_token(data_dir)
    config_path = data_dir / "master.yaml"
    if args.autoscale:
        user_cfg = deep_merge(autoscale_config(args.agents, args.slots_per_agent, args.idle_period), user_cfg)
    procs.write_private(config_path, yaml.safe_dump(master_config(data_dir, port, token_file, user_cfg),
                                                    sort_keys=False))

    previous: bytes | None = None
    try:
        previous = (data_dir / PIDS).read_bytes()
    except OSError:
        pass
    record = Record(url=url, cluster_id=cid, slots_per_agent=args.slots_per_agent, agent_environments=environments)
    master: subprocess.Popen[Any] | None = None
    agents: dict[int, subprocess.Popen[Any]] = {}
    try:
        master_log = data_dir / "logs" / "master.log"
        master = _spawn([*console_command("det-master", "controlplane.master.main"), "--config", str(config_path)],
                        master_log, cid)
        record.master = master.pid
        record.note(master.pid)
        write_pids(data_dir, record)
        m = master

        def master_failed() -> str | None:
            if m.poll() is not None:
                return f"the master exited with status {m.returncode}; {master_log}:\n{log_tail(master_log)}"
            return None

        _wait(f"the master at {url}", lambda: info_ok(url, 1.0), master_failed, MASTER_START_TIMEOUT_S)
        for i in range(0 if args.autoscale else args.agents):
            agents[i] = _spawn_agent(data_dir, record, i)
            record.agents.append(agents[i].pid)
            record.note(agents[i].pid)
            write_pids(data_dir, record)
        if agents:
            _wait_for_agents(data_dir, url, agents, master_failed)
    except (CliError, KeyboardInterrupt) as e:
        started = [p.pid for p in [*agents.values(), master] if p is not None]
        stop_group_pids([a.pid for a in agents.values()])
        if master is not None:
            stop_group_pids([master.pid])
        for p in [*agents.values(), master]:
            if p is not None:
                p.poll()
        if master is not None:  # the record `up` wrote names only what it just stopped
            if previous is None:
                (data_dir / PIDS).unlink(missing_ok=True)
            else:
                procs.write_private(data_dir / PIDS, previous.decode())
        if isinstance(e, KeyboardInterrupt):
            raise
        raise CliError(f"{e.message}\nStopped what was started (pids {', '.join(map(str, started))}).") from None
    print(f"Master running at {url} with {len(agents)} agent(s) of {args.slots_per_agent} slot(s); "
          f"logs in {data_dir / 'logs'}")
    print(f"export DET_MASTER={url}")
    return 0


# ---- down -----------------------------------------------------------------------------------
def cmd_down(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).expanduser().resolve()
    record = read_pids(data_dir)
    stopped_any = False
    if record is None:
        print(f"No cluster recorded in {data_dir} (no {PIDS}).")
    else:
        live_agents = [p for p in record.agents if record.ours(p)]
        killed = stop_group_pids(live_agents)
        for i, pid in enumerate(record.agents):
            if pid in live_agents:
                how = " (killed)" if pid in killed else ""
                print(f"Stopped agent {AGENT_ID.format(i)} (pid {pid}){how}")
                stopped_any = True
            else:
                print(f"Agent {AGENT_ID.format(i)} (pid {pid}) was not running")
        if record.master is not None:
            if record.ours(record.master):
                killed = stop_group_pids([record.master])
                print(f"Stopped master (pid {record.master}){' (killed)' if killed else ''}")
                stopped_any = True
            else:
                print(f"Master (pid {record.master}) was not running")
    leftovers = leftover_processes(data_dir)
    if leftovers:
        stop_group_pids(leftovers, grace_s=5.0)
        print(f"Stopped {len(leftovers)} leftover process(es) of this cluster: {', '.join(map(str, leftovers))}")
        stopped_any = True
    (data_dir / PIDS).unlink(missing_ok=True)
    if not stopped_any:
        print("Nothing was running.")
    return 0
