"""Network namespaces for tasks, made with the host's ``ip`` (iproute2) and entered with setns(2).

A namespace is named ``det-<agent pid>-<n>`` under ``/run/netns`` so that one left behind by an
agent that died can be told from a live agent's (``remove_stale``). Its outbound traffic, when
asked for, goes through ``slirp4netns`` in user space with the host's loopback cut off
(``--disable-host-loopback``): a task reaches the internet and other hosts, never a port that
something on this host opened on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
from pathlib import Path

from controlplane.common.processes import pid_exists

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
SLIRP_DNS = "10.0.2.3"  # slirp4netns's built-in resolver, which forwards to the host's
_NAME = re.compile(r"^det-(\d+)-\d+$")
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    """A namespace could not be made or configured; the message says which step."""


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace ``fd`` refers to."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def host_namespace_fd() -> int:
    return os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def socket_in(ns_fd: int, host_fd: int, family: socket.AddressFamily = socket.AF_INET) -> socket.socket:
    """A TCP socket that belongs to namespace ``ns_fd``; the calling thread is back in ``host_fd``'s
    after. A socket keeps the namespace it was made in for its whole life."""
    setns(ns_fd)
    try:
        return socket.socket(family, socket.SOCK_STREAM)
    finally:
        setns(host_fd)


def available() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "the agent is not root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def slirp_path() -> str | None:
    return shutil.which("slirp4netns")


def resolv_conf(path: str = "/etc/resolv.conf") -> str | None:
    """What a namespace's /etc/resolv.conf must say when the host's names a resolver on its own
    loopback (systemd-resolved's 127.0.0.53), which no namespace reaches: slirp4netns's own, which
    asks the host's. None when the host's file works as it is."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    servers = [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]
    if not any(s.startswith("127.") or s == "::1" for s in servers):
        return None
    kept = [line for line in lines if not line.startswith("nameserver")]
    return "\n".join([f"nameserver {SLIRP_DNS}", *kept]) + "\n"


async def _ip(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec("ip", *args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {err.decode(errors='replace').strip() or proc.returncode}")


async def create(name: str, addresses: list[str]) -> int:
    """Make namespace ``name`` with its loopback up and ``addresses`` (the host's own, beyond
    127/8) on it, so that a task reaching this host's address reaches only its own namespace.
    Returns an fd for setns; the caller closes it."""
    await _ip("netns", "add", name)
    try:
        await _ip("-n", name, "link", "set", "lo", "up")
        for address in addresses:
            if not address.startswith("127."):
                await _ip("-n", name, "addr", "add", f"{address}/32", "dev", "lo")
        return os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        await delete(name)
        raise


TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


async def add_tun(name: str, ns_fd: int, host_fd: int, device: str, address: str, prefix: int, mtu: int) -> int:
    """A tun device ``device`` in namespace ``name`` (``ns_fd``) at ``address``/``prefix``, up;
    returns its fd (non-blocking; the caller closes it, which removes the device)."""
    setns(ns_fd)  # a tun device is made in the namespace of the thread that asks for it
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", device.encode(), IFF_TUN | IFF_NO_PI))
        except OSError as exc:
            os.close(fd)
            raise NetnsError(f"cannot make {device} in {name}: {exc.strerror}") from None
    finally:
        setns(host_fd)
    try:
        await _ip("-n", name, "addr", "add", f"{address}/{prefix}", "dev", device)
        await _ip("-n", name, "link", "set", device, "mtu", str(mtu), "up")
    except BaseException:
        os.close(fd)
        raise
    return fd


async def delete(name: str) -> None:
    try:
        await _ip("netns", "delete", name)
    except NetnsError as exc:
        if (NETNS_DIR / name).exists():
            log.warning("could not remove network namespace %s: %s", name, exc)


def remove_stale() -> list[str]:
    """Delete the namespaces of agents that are gone (names ``det-<pid>-*`` of a dead pid)."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(NETNS_DIR):
            match = _NAME.match(entry)
            if match is None or pid_exists(int(match.group(1))):
                continue
            subprocess.run(["ip", "netns", "delete", entry], capture_output=True, check=False)
            removed.append(entry)
    return removed


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def start_outbound(name: str, timeout: float = 10.0) -> asyncio.subprocess.Process:
    """slirp4netns giving namespace ``name`` a route out (tap0, 10.0.2.100/24, DNS at SLIRP_DNS),
    with no way to this host's loopback. Returns once the route is configured."""
    binary = slirp_path()
    if binary is None:
        raise NetnsError("slirp4netns is not installed")
    ready_r, ready_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            binary, "--configure", "--mtu=65520", "--disable-host-loopback", f"--ready-fd={ready_w}",
            "--netns-type=path", str(NETNS_DIR / name), "tap0",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            pass_fds=(ready_w,), preexec_fn=_die_with_parent)
    finally:
        os.close(ready_w)
    try:
        ready = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), timeout)
    except TimeoutError:
        ready = b""
    finally:
        os.close(ready_r)
    if ready != b"1":
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        err = b""
        if proc.stderr is not None:
            with contextlib.suppress(TimeoutError):
                err = await asyncio.wait_for(proc.stderr.read(2000), 2.0)
        raise NetnsError(f"slirp4netns did not configure {name}: {err.decode(errors='replace').strip()}")
    return proc


async def stop_outbound(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 5.0)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
