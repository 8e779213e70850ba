"""Carrying out the bake's steps on the builder over SSH (asyncssh).

One connection for the whole plan. The builder's host key is pinned when the cloud reported it
(EC2's console output, GCE's guest attributes); otherwise the first key seen is accepted, and
said so. Connecting is retried only while the builder's SSH is not up yet (refused, unreachable,
timed out, or its key not yet installed), within a deadline; a host key that does not match is never
retried. Each step's output is streamed with a `[step i/n name]` prefix; a step that exits
non-zero raises `StepFailed` with its name, exit code and the tail of its output.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncssh

from agent_image.bake.errors import BakeError, StepFailed
from agent_image.bake.steps import Step, script, upload_command

TAIL_LINES = 20
CONNECT_TIMEOUT_S = 10.0
# After sshd is up, cloud-init / the guest agent installs the bake's key a few seconds later.
KEY_GRACE_S = 90.0
Emit = Callable[[str], None]


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int
    username: str
    client_key: asyncssh.SSHKey
    host_keys: tuple[str, ...] = ()  # OpenSSH public key lines the cloud reported; () = accept on first use
    become: str = "sudo -n"  # how a step gets root; "" when the user is root


def generate_key() -> asyncssh.SSHKey:
    """The bake's temporary client key pair (never written to disk here)."""
    return asyncssh.generate_private_key("ssh-ed25519", comment="det-agent-image-bake")


def public_line(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


_KeyLists = tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]]


def _known_hosts(target: SshTarget) -> _KeyLists | None:
    if not target.host_keys:
        return None
    return [asyncssh.import_public_key(line) for line in target.host_keys], [], []


async def connect(target: SshTarget, *, deadline_s: float = 300.0, retry_every_s: float = 5.0,
                  emit: Emit = print) -> asyncssh.SSHClientConnection:
    """Connect, retrying while the builder's SSH is not up yet; BakeError past the deadline."""
    where = f"{target.username}@{target.host}:{target.port}"
    start = time.monotonic()
    denied_since: float | None = None
    while True:
        try:
            conn = await asyncssh.connect(
                target.host, target.port, username=target.username, client_keys=[target.client_key],
                known_hosts=_known_hosts(target), config=None, agent_path=None, password=None,
                preferred_auth="publickey", connect_timeout=CONNECT_TIMEOUT_S, keepalive_interval=30)
            break
        except asyncssh.HostKeyNotVerifiable as e:
            raise BakeError(f"the builder at {where} presented a host key that is not the one its cloud reported "
                            f"({e.reason}); refusing to provision it") from e
        except asyncssh.PermissionDenied as e:
            now = time.monotonic()
            denied_since = denied_since or now
            if now - denied_since >= min(KEY_GRACE_S, deadline_s) or now - start >= deadline_s:
                raise BakeError(f"the builder at {where} refused the bake's SSH key ({e.reason}); "
                                "is --ssh-user right for this base image?") from e
            last: BaseException = e
        except (OSError, TimeoutError, asyncssh.ConnectionLost) as e:
            last = e
        if time.monotonic() - start >= deadline_s:
            raise BakeError(f"the builder's SSH at {where} did not come up within {deadline_s:g} s "
                            f"(last error: {type(last).__name__}: {last})")
        emit(f"waiting for the builder's SSH at {where} ({type(last).__name__})")
        await asyncio.sleep(retry_every_s)
    if not target.host_keys:
        key = conn.get_server_host_key()
        fingerprint = key.get_fingerprint() if key is not None else "unknown"
        emit(f"note: the cloud did not report the builder's host key; accepted {fingerprint} on first use")
    return conn


async def _run(conn: asyncssh.SSHClientConnection, target: SshTarget, command: str, stdin: bytes,
               emit: Emit) -> tuple[int, list[str]]:
    remote = f"{target.become} bash -c {shlex.quote(script(command))}".strip()
    proc: asyncssh.SSHClientProcess[Any] = await conn.create_process(remote, stderr=asyncssh.STDOUT, encoding=None)
    if stdin:
        proc.stdin.write(stdin)
    proc.stdin.write_eof()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    async for raw in proc.stdout:
        if not raw:
            continue
        line = raw.decode(errors="replace").rstrip("\r\n")
        tail.append(line)
        emit(line)
    await proc.wait()
    code = proc.returncode
    return (-1 if code is None else code), list(tail)


async def run_on(conn: asyncssh.SSHClientConnection, target: SshTarget, steps: Sequence[Step],
                 emit: Emit = print) -> None:
    """Run every step in order on an open connection; StepFailed at the first that fails."""
    for i, step in enumerate(steps, 1):
        prefix = f"[step {i}/{len(steps)} {step.name}]"

        def out(line: str, prefix: str = prefix) -> None:
            emit(f"{prefix} {line}")

        started = time.monotonic()
        out("started")
        for upload in step.uploads:
            out(f"uploading {upload.path} ({len(upload.data):,} bytes)")
            code, tail = await _run(conn, target, upload_command(upload), upload.data, out)
            if code != 0:
                raise StepFailed(step.name, code, "\n".join(tail))
        code, tail = await _run(conn, target, step.command, b"", out)
        if code != 0:
            raise StepFailed(step.name, code, "\n".join(tail))
        out(f"done in {time.monotonic() - started:.1f} s")


async def provision(target: SshTarget, steps: Sequence[Step], *, emit: Emit = print,
                    deadline_s: float = 300.0, retry_every_s: float = 5.0) -> None:
    """Connect to the builder and run the plan."""
    conn = await connect(target, deadline_s=deadline_s, retry_every_s=retry_every_s, emit=emit)
    async with conn:
        await run_on(conn, target, steps, emit)
