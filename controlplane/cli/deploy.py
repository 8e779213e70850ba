"""`det deploy local up|down`: a whole cluster (one master, N agents) as local processes.

`up` is idempotent: when `<data-dir>/pids.json` names live processes and the master answers
`/info`, it says "already running" and exits 0. Everything it starts runs in its own session
(process group) with its output in `<data-dir>/logs/`, so `down` can stop each group (SIGTERM,
then SIGKILL after 15 s) even after `up` has exited. A failed `up` stops what it started and
shows the tail of the log of the process that failed.
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
from pathlib import Path
from typing import Any

import requests
import yaml

from controlplane.cli.errors import CliError

MASTER_START_TIMEOUT_S = 60.0
AGENTS_CONNECT_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
PIDS = "pids.json"
AGENT_ID = "local-agent-{}"


# ---- small process helpers ------------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_ours(pid: int, data_dir: Path) -> bool:
    """A pid from pids.json still belongs to this cluster (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    cmdline = _cmdline(pid)
    return not cmdline or str(data_dir) in cmdline  # no /proc (non-Linux): trust the pid file


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


def _ancestors() -> set[int]:
    found = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def leftover_processes(data_dir: Path) -> list[int]:
    """Processes of this cluster no pid file names: trials whose agent died, say.

    A process counts if its cmdline names the data dir, its cwd lies inside it, or one of its
    DET_* environment variables points inside it; `det deploy` commands themselves never count.
    """
    root = str(data_dir)
    skip = _ancestors()
    uid = os.getuid()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        pid = int(entry.name)
        try:
            if entry.stat().st_uid != uid:
                continue
            cmdline = _cmdline(pid)
            if "deploy local" in cmdline or not pid_alive(pid):
                continue
            hit = root in cmdline
            if not hit:
                try:
                    cwd = os.readlink(entry / "cwd")
                    hit = cwd == root or cwd.startswith(root + os.sep)
                except OSError:
                    pass
            if not hit:
                environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                hit = any(e.startswith("DET_") and "=" in e and e.split("=", 1)[1].startswith(root + os.sep)
                          for e in environ)
        except OSError:
            continue
        if hit:
            found.append(pid)
    return found


# ---- files ----------------------------------------------------------------------------------
def read_pids(data_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((data_dir / PIDS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_pids(data_dir: Path, master: int | None, agents: list[int], url: str) -> None:
    tmp = data_dir / (PIDS + ".tmp")
    tmp.write_text(json.dumps({"master": master, "agents": agents, "url": url}, indent=2))
    os.replace(tmp, data_dir / PIDS)


def ensure_join_token(data_dir: Path) -> Path:
    """`<data-dir>/join-token`, created once (mode 0600) and reused so agents keep working."""
    path = data_dir / "join-token"
    if path.exists() and path.read_text().strip():
        os.chmod(path, 0o600)
        return path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(path, 0o600)
    return path


def deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "checkpoint_storage":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_user_config(path: str | None) -> dict:
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


def master_config(data_dir: Path, port: int, token_file: Path, user_cfg: dict) -> dict:
    defaults = {
        "port": port,
        "data_dir": str(data_dir),
        "db": {"url": f"sqlite:///{data_dir / 'master.db'}"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(data_dir / "checkpoints")},
    }
    cfg = deep_merge(defaults, user_cfg)
    cfg["port"] = port
    security = cfg.get("security") if isinstance(cfg.get("security"), dict) else {}
    cfg["security"] = {**security, "join_token_file": str(token_file)}
    cfg["security"].pop("join_token", None)
    return cfg


def autoscale_config(max_agents: int, slots: int, idle_period: str) -> dict:
    """The default pool served by the `local` provider: agents start on demand and go when idle."""
    return {"autoscaler_tick": "1s", "resource_pools": [{"pool_name": "default", "provider": {
        "type": "local", "instance_type": "local", "min_instances": 0, "max_instances": max_agents,
        "slots_per_instance": slots, "max_idle_agent_period": idle_period, "max_agent_starting_period": "2m"}}]}


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


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            raise CliError(f"cannot start {cmd[0]}: {e.strerror}") from None


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
    return {a.get("id") for a in agents if isinstance(a, dict) and a.get("connected", True)}


# ---- up -------------------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).expanduser().resolve()
    existing = read_pids(data_dir)
    if existing:
        pids = [p for p in [existing.get("master"), *(existing.get("agents") or [])] if isinstance(p, int)]
        live = [p for p in pids if is_ours(p, data_dir)]
        url = str(existing.get("url") or "")
        if live and isinstance(existing.get("master"), int) and existing["master"] in live and info_ok(url):
            print(f"already running at {url}")
            print(f"export DET_MASTER={url}")
            return 0
        if live:
            print(f"Stopping what is left of a previous cluster in {data_dir}", file=sys.stderr)
            stop_group_pids(live)
        (data_dir / PIDS).unlink(missing_ok=True)

    if args.agents < 0 or args.slots_per_agent < 0:
        raise CliError("--agents and --slots-per-agent must not be negative")
    user_cfg = load_user_config(args.master_config)
    port = args.port or user_cfg.get("port") or 8080
    if not isinstance(port, int) or not 0 < port < 65536:
        raise CliError(f"invalid port {port!r}")
    host = str(user_cfg.get("host") or "127.0.0.1")
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "::", "", "localhost") else host
    url = f"http://{connect_host}:{port}"
    if not port_free("0.0.0.0" if host in ("0.0.0.0", "::") else connect_host, port):
        raise CliError(f"port {port} is already in use; pick another with --port")

    for sub in ("logs", "agents"):
        (data_dir / sub).mkdir(parents=True, exist_ok=True)
    token_file = ensure_join_token(data_dir)
    config_path = data_dir / "master.yaml"
    if args.autoscale:
        user_cfg = deep_merge(autoscale_config(args.agents, args.slots_per_agent, args.idle_period), user_cfg)
    config_path.write_text(yaml.safe_dump(master_config(data_dir, port, token_file, user_cfg), sort_keys=False))

    master: subprocess.Popen | None = None
    agents: list[subprocess.Popen] = []
    try:
        master_log = data_dir / "logs" / "master.log"
        master = _spawn([*console_command("det-master", "controlplane.master.main"), "--config", str(config_path)],
                        master_log)
        write_pids(data_dir, master.pid, [], url)
        m = master

        def master_failed() -> str | None:
            if m.poll() is not None:
                return f"the master exited with status {m.returncode}; {master_log}:\n{log_tail(master_log)}"
            return None

        _wait(f"the master at {url}", lambda: info_ok(url, 1.0), master_failed, MASTER_START_TIMEOUT_S)
        agent_cmd = console_command("det-agent", "agent_image.agent.main")
        for i in range(0 if args.autoscale else args.agents):
            agents.append(_spawn([*agent_cmd, "--master", url, "--join-token-file", str(token_file),
                                  "--agent-id", AGENT_ID.format(i), "--slots", str(args.slots_per_agent),
                                  "--work-dir", str(data_dir / "agents" / str(i))],
                                 data_dir / "logs" / f"agent-{i}.log"))
            write_pids(data_dir, master.pid, [a.pid for a in agents], url)
        if agents:
            wanted = {AGENT_ID.format(i) for i in range(args.agents)}
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
                for i, a in enumerate(agents):
                    if a.poll() is not None:
                        path = data_dir / "logs" / f"agent-{i}.log"
                        return f"agent {AGENT_ID.format(i)} exited with status {a.returncode}; {path}:\n{log_tail(path)}"
                return None

            _wait(f"{args.agents} agent(s) to connect", all_connected, agent_failed, AGENTS_CONNECT_TIMEOUT_S)
            if len(unverifiable) > 25:
                print("Warning: could not log in as 'determined' to check that the agents connected.",
                      file=sys.stderr)
    except (CliError, KeyboardInterrupt) as e:
        started = [p.pid for p in [*agents, master] if p is not None]
        stop_group_pids([a.pid for a in agents])
        if master is not None:
            stop_group_pids([master.pid])
        for p in [*agents, master]:
            if p is not None:
                p.poll()
        (data_dir / PIDS).unlink(missing_ok=True)
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
    pids = read_pids(data_dir)
    stopped_any = False
    if pids is None:
        print(f"No cluster recorded in {data_dir} (no {PIDS}).")
    else:
        agent_pids = [p for p in pids.get("agents") or [] if isinstance(p, int)]
        live_agents = [p for p in agent_pids if is_ours(p, data_dir)]
        killed = stop_group_pids(live_agents)
        for i, pid in enumerate(agent_pids):
            if pid in live_agents:
                how = " (killed)" if pid in killed else ""
                print(f"Stopped agent {AGENT_ID.format(i)} (pid {pid}){how}")
                stopped_any = True
            else:
                print(f"Agent {AGENT_ID.format(i)} (pid {pid}) was not running")
        master = pids.get("master")
        if isinstance(master, int):
            if is_ours(master, data_dir):
                killed = stop_group_pids([master])
                print(f"Stopped master (pid {master}){' (killed)' if killed else ''}")
                stopped_any = True
            else:
                print(f"Master (pid {master}) was not running")
    leftovers = leftover_processes(data_dir)
    if leftovers:
        stop_group_pids(leftovers, grace_s=5.0)
        print(f"Stopped {len(leftovers)} leftover process(es) of this cluster: {', '.join(map(str, leftovers))}")
        stopped_any = True
    (data_dir / PIDS).unlink(missing_ok=True)
    if not stopped_any:
        print("Nothing was running.")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("deploy", help="run a cluster")
    targets = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    local = targets.add_parser("local", help="a master and agents as local processes")
    sub = local.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("up", help="start (or find running) a local master and agents")
    p.add_argument("--port", type=int, default=None, help="master port (default 8080)")
    p.add_argument("--agents", type=int, default=1, help="number of agents (default 1)")
    p.add_argument("--slots-per-agent", type=int, default=1, help="slots each agent offers (default 1)")
    p.add_argument("--data-dir", default=".det-local", help="state, logs and checkpoints (default .det-local)")
    p.add_argument("--master-config", metavar="FILE", help="master.yaml settings merged over the defaults")
    p.add_argument("--autoscale", action="store_true",
                   help="start no agents: the master launches up to --agents local agents on demand "
                        "(the `local` provider) and stops them when idle")
    p.add_argument("--idle-period", default="15s", help="with --autoscale: idle time before an agent goes")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop the local master and agents")
    p.add_argument("--data-dir", default=".det-local")
    p.set_defaults(func=cmd_down)
