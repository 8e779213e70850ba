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

`pids.json`, stopping process groups and the logs: `deploy_records.py`; `master.yaml`, the join
token and the agents' environments: `deploy_local_config.py`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from controlplane.cli import deploy_procs as procs
from controlplane.cli.deploy_local_config import (
    agent_environments,
    autoscale_config,
    deep_merge,
    ensure_join_token,
    load_user_config,
    master_config,
)
from controlplane.cli.deploy_records import (
    PIDS,
    Record,
    _agent_log,
    leftover_processes,
    log_tail,
    read_pids,
    rotate_log,
    stop_group_pids,
    write_pids,
)
from controlplane.cli.errors import CliError

MASTER_START_TIMEOUT_S = 60.0
AGENTS_CONNECT_TIMEOUT_S = 60.0
RUNNING_MASTER_WAIT_S = 15.0  # a recorded master that runs may still be starting
AGENT_ID = "local-agent-{}"


# ---- starting processes ---------------------------------------------------------------------
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
