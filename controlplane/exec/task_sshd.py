"""An SSH server inside a task's sandbox (asyncssh): commands, and interactive shells on a pty.

It trusts one client key (the job's, which the master gives its owner and every task of the job)
and presents one host key (the job's host key, which clients pin in their known-hosts). Any user
name is accepted: the key is the credential. A command runs as ``bash -c CMD`` with the task's
environment; a session without a command gets ``bash -l`` on a pseudo-terminal when the client
asks for one (``ssh -t``, an interactive login), else bash reading the client's stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import struct
import termios
from typing import Any

import asyncssh


def _winsize(fd: int, size: tuple[int, int, int, int]) -> None:
    cols, rows = size[0], size[1]
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


async def _pipe_session(process: asyncssh.SSHServerProcess[Any], argv: list[str], env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(*argv, env=env, start_new_session=True,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        stdin = proc.stdin
        assert stdin is not None
        try:
            while data := await process.stdin.read(65536):
                stdin.write(data)
                await stdin.drain()
        except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged, ConnectionError, BrokenPipeError):
            pass
        with contextlib.suppress(Exception):
            stdin.close()

    async def pump(src: asyncio.StreamReader, dst: Any) -> None:
        while data := await src.read(65536):
            with contextlib.suppress(Exception):
                dst.write(data)

    feeder = asyncio.ensure_future(feed())
    await asyncio.gather(pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr))
    code = await proc.wait()
    feeder.cancel()
    return code if code >= 0 else 128 - code


async def _pty_session(process: asyncssh.SSHServerProcess[Any], argv: list[str], env: dict[str, str]) -> int:
    master, slave = pty.openpty()
    size = process.get_terminal_size()
    if size:
        _winsize(slave, size)
    env = {**env, "TERM": process.get_terminal_type() or "xterm"}
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=slave, stdout=slave, stderr=slave,
                                                start_new_session=True)
    os.close(slave)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(master)
            done.set()
            return
        with contextlib.suppress(Exception):
            process.stdout.write(data)

    loop.add_reader(master, readable)

    async def feed() -> None:
        while True:
            try:
                data = await process.stdin.read(65536)
            except asyncssh.TerminalSizeChanged as change:
                _winsize(master, (change.width, change.height, 0, 0))
                continue
            except (asyncssh.BreakReceived, ConnectionError):
                continue
            if not data:
                return
            with contextlib.suppress(OSError):
                os.write(master, data)

    feeder = asyncio.ensure_future(feed())
    code = await proc.wait()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(done.wait(), 1.0)  # the last output still in the pty
    loop.remove_reader(master)
    os.close(master)
    feeder.cancel()
    return code if code >= 0 else 128 - code


def handler(env: dict[str, str]) -> Any:
    async def handle(process: asyncssh.SSHServerProcess[Any]) -> None:
        command = process.command
        if command:
            argv = ["bash", "-c", command]
        else:
            argv = ["bash", "-l"] if process.get_terminal_type() else ["bash"]
        try:
            if process.get_terminal_type():
                code = await _pty_session(process, argv, env)
            else:
                code = await _pipe_session(process, argv, env)
        except OSError as e:
            process.stderr.write(f"cannot start {argv[0]}: {e}\n".encode())
            code = 127
        process.exit(code)

    return handle


async def serve(port: int, host_key_file: str, client_key_file: str, env: dict[str, str],
                host: str = "") -> asyncssh.SSHAcceptor:
    """Listen on ``port`` until the returned acceptor is closed."""
    client = asyncssh.read_private_key(client_key_file)
    authorized = asyncssh.import_authorized_keys(client.export_public_key().decode())
    return await asyncssh.listen(host, port, server_host_keys=[asyncssh.read_private_key(host_key_file)],
                                 authorized_client_keys=authorized, process_factory=handler(env), encoding=None,
                                 allow_scp=False, agent_forwarding=False, x11_forwarding=False, allow_pty=True)


def public_line(private_key_text: str) -> str:
    """``ssh-ed25519 AAAA...`` of an OpenSSH private key: what known-hosts and authorized-keys hold."""
    return asyncssh.import_private_key(private_key_text).export_public_key().decode().strip()
