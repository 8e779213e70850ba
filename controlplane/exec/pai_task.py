"""What every OpenPAI task runs: SSH for the job, then the role's command.

``python3 -m controlplane.exec.pai_task COMMAND``:

- serves SSH (``task_sshd``) on the task's ``ssh`` port (``PAI_CONTAINER_HOST_ssh_PORT_LIST``) with
  the job's host key, trusting the job's key;
- writes an OpenSSH client config naming every task of the job ``<role>-<index>`` (its address and
  ssh port, from ``PAI_HOST_IP_*`` and ``PAI_PORT_LIST_*_ssh``), with the job's key as identity and
  the job's host key pinned, and puts ``ssh`` and ``scp`` shims first on ``PATH`` that use it: OpenSSH
  finds ``~/.ssh`` through the passwd entry, which a sandboxed task's user has no writable one of;
- runs ``bash -c COMMAND`` and exits with its code; SIGTERM and SIGINT are passed on to it. With
  ``DET_TASK_MEMORY_LIMIT_MB`` (an OpenPAI role's ``memoryMB``) the command's data segment, which on
  Linux counts every private anonymous mapping, is capped there (``RLIMIT_DATA``): an allocation past
  it fails in the task (Python raises MemoryError) instead of the agent's machine swapping.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shlex
import shutil
import signal
import sys
from pathlib import Path

SSH_DIR_NAME = "pai-ssh"
MEMORY_LIMIT_ENV = "DET_TASK_MEMORY_LIMIT_MB"


def _info_dir() -> Path:
    return Path(os.environ.get("DET_INFO_DIR") or "/run/determined/info")


def _key_files() -> tuple[str, str] | None:
    info = _info_dir()
    try:
        ports = json.loads((info / "ports.json").read_text())
    except (OSError, ValueError):
        return None
    if not ports.get("ssh_key_file") or not ports.get("ssh_host_key_file"):
        return None
    return str(info / ports["ssh_key_file"]), str(info / ports["ssh_host_key_file"])


def tasks(env: dict[str, str]) -> list[tuple[str, str, int]]:
    """(alias, address, ssh port) of every task of the job that has an ssh port."""
    out = []
    for role in filter(None, env.get("PAI_TASK_ROLE_LIST", "").split(",")):
        for index in range(int(env.get(f"PAI_TASK_ROLE_TASK_COUNT_{role}", "0") or 0)):
            port = env.get(f"PAI_PORT_LIST_{role}_{index}_ssh", "").split(",")[0]
            address = env.get(f"PAI_HOST_IP_{role}_{index}", "")
            if port.isdigit() and address:
                out.append((f"{role}-{index}", address, int(port)))
    return out


def write_client_config(directory: Path, env: dict[str, str], key_file: str, host_public: str) -> dict[str, str]:
    """The config, known-hosts, a private copy of the key and the shims; the PATH that uses them."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = directory / "id_ed25519"
    shutil.copyfile(key_file, key)
    key.chmod(0o600)
    known = directory / "known_hosts"
    lines, hosts = [], []
    for alias, address, port in tasks(env):
        lines.append(f"{alias} {host_public}")
        hosts.append(f"Host {alias}\n  HostName {address}\n  Port {port}\n  HostKeyAlias {alias}\n")
    known.write_text("".join(f"{line}\n" for line in lines))
    config = directory / "config"
    config.write_text("".join(hosts) + (
        "Host *\n  User det\n"
        f"  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n"))
    config.chmod(0o600)
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ssh", "scp"):
        real = shutil.which(tool, path=os.environ.get("PATH", "").replace(str(bin_dir), ""))
        if real is None:
            continue
        shim = bin_dir / tool
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(real)} -F {shlex.quote(str(config))} \"$@\"\n")
        shim.chmod(0o755)
    path = env.get("PATH", "")
    return {"PATH": f"{bin_dir}{os.pathsep}{path}" if path else str(bin_dir), "PAI_SSH_CONFIG": str(config)}


async def _run(command: str) -> int:
    env = dict(os.environ)
    server = None
    keys = _key_files()
    port = env.get("PAI_CONTAINER_HOST_ssh_PORT_LIST", "").split(",")[0]
    if keys is not None:
        from controlplane.exec import task_sshd

        key_file, host_key_file = keys
        host_public = task_sshd.public_line(Path(host_key_file).read_text())
        env.update(write_client_config(Path(os.environ.get("TMPDIR") or "/tmp") / SSH_DIR_NAME, env, key_file,
                                       host_public))
        if port.isdigit():
            server = await task_sshd.serve(int(port), host_key_file, key_file, env)  # quietly: logs are the task's
    limit_mb = env.get(MEMORY_LIMIT_ENV, "")
    limit = int(limit_mb) * 1024 * 1024 if limit_mb.isdigit() and int(limit_mb) > 0 else None

    def cap_memory() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    proc = await asyncio.create_subprocess_exec("bash", "-c", command, env=env, preexec_fn=cap_memory)
    loop = asyncio.get_running_loop()

    def forward(sig: int) -> None:
        if proc.returncode is None:
            proc.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, forward, sig)
    code = await proc.wait()
    if server is not None:
        server.close()
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if len(args) != 1:
        print("usage: python3 -m controlplane.exec.pai_task COMMAND", file=sys.stderr)
        return 2
    return asyncio.run(_run(args[0]))


if __name__ == "__main__":
    sys.exit(main())
