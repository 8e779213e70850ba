"""SSH into a task with the key its master hands to the owner: `det pai ssh`, `det shell open`.

The key is written 0600 into a 0700 folder under the auth store's directory (one folder per task,
rewritten on every use), beside a known-hosts file that pins the task's host key, so OpenSSH's
``ssh`` checks the server strictly without asking and without touching the user's own
``~/.ssh/known_hosts``. Then ``ssh`` replaces this process: the terminal is the user's, and its
exit status is the command's.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from controlplane.cli.errors import CliError

KEY_NAME = "id_ed25519"
KNOWN_HOSTS_NAME = "known_hosts"


def private_folder(*parts: str) -> Path:
    """``<auth store dir>/<parts...>``, created 0700 (and made 0700 if it was not)."""
    from controlplane.cli.auth_store import store_path

    folder = store_path().parent.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    return folder


def write_key(folder: Path, private_key: str) -> Path:
    """The private key, 0600 from the moment it exists."""
    key = folder / KEY_NAME
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(private_key.rstrip("\n") + "\n")
    key.chmod(0o600)
    return key


def write_known_hosts(folder: Path, lines: Iterable[str]) -> Path:
    known = folder / KNOWN_HOSTS_NAME
    known.write_text("".join(f"{line}\n" for line in lines))
    return known


def known_host_line(host: str, port: int, public_key: str) -> str:
    """OpenSSH's known-hosts entry for a server on a port other than 22: ``[host]:port key``."""
    return f"[{host}]:{port} {public_key.strip()}"


def ssh_argv(key: Path, known: Path, user: str, host: str, port: int | str, command: list[str]) -> list[str]:
    """OpenSSH with only this key and only this host key accepted; ``command`` runs instead of a shell."""
    return ["ssh", "-i", str(key), "-p", str(port), "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR", f"{user}@{host}", *command]


def remote_command(words: list[str]) -> list[str]:
    """argparse.REMAINDER's words without a leading ``--`` (``det ... -- echo hi``)."""
    return words[1:] if words[:1] == ["--"] else list(words)


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    """True once ``host:port`` accepts a TCP connection (a task's SSH server starting up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def show(argv: list[str]) -> str:
    return shlex.join(argv)


def exec_ssh(argv: list[str]) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        raise CliError(f"cannot run ssh (OpenSSH's client): {e.strerror}") from None
