"""SSH between the containers of a gang, for the DeepSpeed and Horovod launchers (asyncssh).

- Every non-chief container's launcher runs :func:`serve` on the SSH port the master gave it. It
  trusts only the allocation's key pair (``ssh_key_file`` of rendezvous.json, the same key for
  every container: it authenticates the chief, and is the server's host key, so the chief checks
  it reached a container of its own gang). Each command it is asked to run goes to ``sh -c`` in a
  process group of its own, with the container's environment plus ``extra_env``; its output goes
  back over the channel; a closed connection stops it (SIGTERM, SIGKILL after the grace).
- The chief reaches container ``i`` as the host alias ``det-container-i`` (several containers may
  share one address, so the tools' host files name aliases): ``hosts.json`` in the launcher's
  directory maps each alias to its address and port. Two shims on the tools' ``PATH`` use it:
  ``pdsh`` (what DeepSpeed's runner calls: ``-w`` hosts, ``%n`` = the host's index, the chief's
  own alias run locally, every command stopped with the others when one fails) and ``ssh``
  (Horovod's and DeepSpeed's ``ssh HOST CMD``).

``python3 -m launchers._ssh pdsh ...`` / ``ssh ...`` / ``exec ALIAS CMD`` are those entry points.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launchers import monitor

HOSTS_ENV = "DET_LAUNCHER_SSH_HOSTS"
WAIT_ENV = "DET_LAUNCHER_SSH_WAIT_S"
DEFAULT_WAIT_S = 600.0
USER = "det"


def alias(rank: int) -> str:
    return f"det-container-{rank}"


def _wait_s() -> float:
    try:
        return float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT_S)
    except ValueError:
        return DEFAULT_WAIT_S


def _import_asyncssh() -> Any:
    try:
        import asyncssh
    except ImportError:
        raise SystemExit("the 'asyncssh' package is not installed (pip install asyncssh): the DeepSpeed and "
                         "Horovod launchers start other containers' workers over SSH with it") from None
    return asyncssh


def load_key(path: str | None) -> Any:
    if not path:
        raise SystemExit("this gang spans containers but the agent gave no SSH key (ports.json ssh_key_file): "
                         "the master and agents need this version for DeepSpeed/Horovod across agents")
    return _import_asyncssh().read_private_key(path)


def write_tool_dir(directory: Path, hosts: dict[str, dict[str, Any]], key_file: str | None) -> dict[str, str]:
    """``hosts.json`` and the ``pdsh``/``ssh`` shims; the environment the tools need to use them."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.json").write_text(json.dumps({"hosts": hosts, "key_file": key_file}))
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("pdsh", "ssh"):
        shim = bin_dir / tool
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m launchers._ssh {tool} \"$@\"\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    path = os.environ.get("PATH", "")
    return {HOSTS_ENV: str(directory / "hosts.json"), "PATH": f"{bin_dir}{os.pathsep}{path}" if path else str(bin_dir)}


def _hosts() -> tuple[dict[str, dict[str, Any]], str | None]:
    path = os.environ.get(HOSTS_ENV)
    if not path:
        raise SystemExit(f"{HOSTS_ENV} is not set: this shim is meant to run under launchers.deepspeed/horovod")
    data = json.loads(Path(path).read_text())
    return data["hosts"], data.get("key_file")


# ---- the server (non-chief containers) ------------------------------------------------------
class _Session:
    """One command run for the chief."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.code: int | None = None


async def serve(port: int, key_file: str | None, extra_env: dict[str, str], grace_s: float,
                on_session: Callable[[_Session], None], host: str = "") -> Any:
    """Listen on ``port``; returns the asyncssh server (``close()`` it to stop listening)."""
    asyncssh = _import_asyncssh()
    key = load_key(key_file)
    authorized = asyncssh.import_authorized_keys(key.export_public_key().decode())

    async def handle(process: Any) -> None:
        command = process.command or "true"
        env = {**os.environ, **extra_env}
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, env=env, start_new_session=True,
                                                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        session = _Session(proc)
        on_session(session)

        async def pump(src: asyncio.StreamReader, dst: Any) -> None:
            while data := await src.read(65536):
                try:
                    dst.write(data)
                except Exception:  # noqa: BLE001 - the chief went away: keep draining, it is being stopped
                    pass

        assert proc.stdout is not None and proc.stderr is not None
        pumps = asyncio.gather(pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr))
        closed = asyncio.ensure_future(process.channel.wait_closed())
        done, _ = await asyncio.wait({asyncio.ensure_future(proc.wait()), closed}, return_when=asyncio.FIRST_COMPLETED)
        if closed in done and proc.returncode is None:  # the chief hung up: stop what it started
            await _stop_group(proc, grace_s)
        rc = await proc.wait()
        await pumps
        session.code = monitor.exit_code(rc)
        if not closed.done():
            process.exit(session.code)
        closed.cancel()

    return await asyncssh.listen(host, port, server_host_keys=[key], authorized_client_keys=authorized,
                                 process_factory=handle, encoding=None, allow_scp=False, agent_forwarding=False,
                                 x11_forwarding=False, allow_pty=False)


async def _stop_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
            return
        except TimeoutError:
            continue


def serve_for_chief(*, port: int, key_file: str | None, extra_env: dict[str, str], prog: str, rank: int) -> int:
    """A non-chief container's launcher: serve SSH until the chief's command(s) have run, under the
    shared monitor's rules (a worker failing here stops the others; SIGTERM stops everything).
    Exits with the first failure's code, else 0; 1 when the chief never came."""
    status = monitor.status_dir()
    env = {**extra_env, "DET_LAUNCHER_STATUS_DIR": status}
    group = monitor.Group([], log_prefix=prog, status_dir=status)
    sessions: list[_Session] = []

    def adopt(session: _Session) -> None:
        sessions.append(session)
        group.adopt(f"session {len(sessions)}", session.proc.pid)

    async def watch() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, group.on_signal, sig)
        server = await serve(port, key_file, env, group.grace_s, adopt)
        print(f"{prog}: container {rank} serves SSH on port {port} for the chief", file=sys.stderr, flush=True)
        deadline = time.monotonic() + _wait_s()
        try:
            while True:
                group.tick()
                if sessions and all(s.code is not None for s in sessions):
                    first_bad = next((s.code for s in sessions if s.code), 0)
                    return group.failure or first_bad or 0
                if not sessions and (group.kill_at is not None or time.monotonic() > deadline):
                    if group.kill_at is None:
                        print(f"{prog}: the chief did not connect within {_wait_s():g}s ({WAIT_ENV})",
                              file=sys.stderr, flush=True)
                    return group.failure or 1
                await asyncio.sleep(0.05)
        finally:
            server.close()
            group.cleanup()

    return asyncio.run(watch())


# ---- the client (the chief) -----------------------------------------------------------------
async def _run_remote(entry: dict[str, Any], key_file: str | None, command: str) -> int:
    asyncssh = _import_asyncssh()
    key = load_key(key_file)
    deadline = time.monotonic() + _wait_s()
    while True:  # the other container's launcher may not be listening yet
        try:
            conn = await asyncssh.connect(entry["addr"], int(entry["port"]), username=USER, client_keys=[key],
                                          known_hosts=([key.convert_to_public()], [], []), agent_path=None,
                                          config=None)
            break
        except (OSError, asyncssh.Error) as e:
            if time.monotonic() > deadline:
                print(f"launchers._ssh: cannot reach {entry['addr']}:{entry['port']}: {e}", file=sys.stderr)
                return 255
            await asyncio.sleep(0.2)
    async with conn:
        proc = await conn.create_process(command, encoding=None)

        async def pump(src: Any, dst: Any) -> None:
            while data := await src.read(65536):
                dst.write(data)
                dst.flush()

        await asyncio.gather(pump(proc.stdout, sys.stdout.buffer), pump(proc.stderr, sys.stderr.buffer))
        result = await proc.wait()
    if result.exit_signal:
        return 128 + int(getattr(signal, f"SIG{result.exit_signal[0]}", 1))
    return int(result.exit_status or 0) if result.exit_status is not None else 255


def run_remote(name: str, command: str) -> int:
    hosts, key_file = _hosts()
    if name not in hosts:
        raise SystemExit(f"launchers._ssh: unknown host {name!r} (known: {', '.join(hosts)})")
    entry = hosts[name]
    if entry.get("self"):
        return monitor.exit_code(os.spawnvp(os.P_WAIT, "sh", ["sh", "-c", command]))

    loop = asyncio.new_event_loop()
    task = loop.create_task(_run_remote(entry, key_file, command))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # hang up: the server stops the command
        loop.add_signal_handler(sig, task.cancel)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        return 143
    finally:
        loop.close()


def pdsh(argv: list[str]) -> int:
    """The part of pdsh DeepSpeed's runner uses: ``-w h1,h2 [-S] [-f N] [-R m] [-l u] CMD...``."""
    hosts: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        if opt in ("-w", "-f", "-R", "-l", "-u", "-t"):
            if opt == "-w":
                hosts = [h for h in argv[i + 1].split(",") if h]
            i += 2
        else:  # -S, -b, -N: flags
            i += 1
    command = " ".join(argv[i:])
    if not hosts or not command:
        raise SystemExit("usage: pdsh -w HOST[,HOST...] COMMAND...")
    known, _ = _hosts()
    workers = []
    for n, host in enumerate(hosts):
        cmd = command.replace("%n", str(n)).replace("%h", host)
        if known.get(host, {}).get("self"):
            workers.append(monitor.Worker(["sh", "-c", cmd], name=host))
        else:
            workers.append(monitor.Worker([sys.executable, "-m", "launchers._ssh", "exec", host, cmd], name=host))
    return monitor.run(workers, log_prefix="pdsh")


def ssh(argv: list[str]) -> int:
    """``ssh [OPTIONS] HOST [COMMAND...]`` (options are ignored: the gang's map gives port and key)."""
    with_value = set("bcDEeFIiJLlmOopQRSWw")
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        opt = argv[i]
        i += 2 if len(opt) == 2 and opt[1] in with_value else 1
    if i < len(argv) and argv[i] == "--":
        i += 1
    if i >= len(argv):
        raise SystemExit("usage: ssh HOST COMMAND...")
    host = argv[i].split("@", 1)[-1]
    return run_remote(host, " ".join(argv[i + 1:]) or "true")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: python3 -m launchers._ssh (pdsh|ssh|exec) ...")
    if args[0] == "pdsh":
        return pdsh(args[1:])
    if args[0] == "ssh":
        return ssh(args[1:])
    if args[0] == "exec" and len(args) == 3:
        return run_remote(args[1], args[2])
    raise SystemExit(f"launchers._ssh: unknown use {args[0]!r}")


if __name__ == "__main__":
    sys.exit(main())
