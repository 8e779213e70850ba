"""Each job's tasks on this agent in a network of their own: they reach each other, the master,
their checkpoint storage and the world outside, and nothing of another task or of this host.

The master names a network per task (``StartTask.network``): a trial's allocation, or an OpenPAI
job's attempt (commands, shells, notebooks and TensorBoards are one-task jobs), when all of it runs
on this agent; the tasks of one network share one namespace (``netns.py``). Inside it:

- loopback, and this host's own addresses on loopback, so a server a task binds on its address
  (``PAI_CONTAINER_HOST_IP``) is there, and another task reaching this host reaches only itself;
- for each endpoint the task must reach that lives on this host (the master, and a checkpoint
  storage endpoint such as MinIO's or an emulator's), a relay listening at the same address and
  port inside, so the task's URLs work unchanged;
- for each port the master booked for the task (``StartTask.served_ports``: its Jupyter, its
  TensorBoard, its SSH server), a forward from the host's address into the namespace: this is how
  the master's proxy and an SSH client reach it; what listens there still demands the task's
  secret or key;
- a route out through slirp4netns, without this host's loopback.

A gang or job spread over several agents has a namespace on each, joined by the agents into one
network (``StartTask.overlay``, ``overlay.py``): its tasks reach each other at their addresses there,
on every port, since collectives open ports no relay knows ahead. It runs on the host's network only
when one of its agents does (``--task-network host``, or no namespaces to be had).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from controlplane.wire.agent_protocol import Overlay, StartTask

from . import netns, overlay
from .tcp_relay import Relay, listening_socket, open_with

log = logging.getLogger(__name__)

# Where a task's tools find the endpoints it must reach (besides the master and the storage config).
ENDPOINT_VARIABLES = ("STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
# A client of a forwarded port (the proxy, `det shell`'s ssh) that comes while the task's server is
# still starting waits this long for it, as it would for a slow server, instead of being cut off.
FORWARD_PATIENCE_S = 60.0
_NAMES = itertools.count(1)  # of this process's namespaces (det-<pid>-<n>), whichever TaskNetworks made them


@dataclass(frozen=True)
class NetworkPlan:
    """What one task's network needs (pure: built from its StartTask)."""

    group: str  # the namespace it shares with its job's or gang's other tasks here
    address: str  # where its servers listen inside (this host's address, or its address in an overlay)
    upstreams: tuple[tuple[str, int], ...]  # this host's endpoints relayed in at the same address
    served: tuple[int, ...]  # ports forwarded from ``host_address`` on the host to ``address`` inside
    host_address: str = ""  # where the master reaches this host ("": ``address``)
    overlay: Overlay | None = None  # the network spans agents

    @property
    def listen_address(self) -> str:
        return self.host_address or self.address


def _endpoint(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url if "//" in url else f"http://{url}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    host = parts.hostname or ""
    return ("127.0.0.1" if host == "localhost" else host), port


def _storage_endpoint(trial_info: dict[str, Any] | None) -> str:
    config = (trial_info or {}).get("config")
    storage = config.get("checkpoint_storage") if isinstance(config, dict) else None
    url = storage.get("endpoint_url") if isinstance(storage, dict) else None
    return url if isinstance(url, str) else ""


def plan(msg: StartTask, master_url: str, env: dict[str, str], local: set[str]) -> NetworkPlan | None:
    """The network of the task ``msg`` (None: the host's). ``local``: this host's addresses;
    ``env``: the task's environment variables."""
    if not msg.network:
        return None
    address = msg.container_addrs[msg.rank] if msg.rank < len(msg.container_addrs) else "127.0.0.1"
    spread, host_address = msg.overlay, ""
    if spread is not None:
        if not 0 <= spread.index < len(spread.members):
            return None
        address, host_address = spread.members[spread.index].address, spread.members[spread.index].host
    urls = [master_url, _storage_endpoint(msg.trial_info), *(env.get(v, "") for v in ENDPOINT_VARIABLES)]
    upstreams = []
    for url in urls:
        found = _endpoint(url) if url else None
        if found is not None and (found[0].startswith("127.") or found[0] in local) and found not in upstreams:
            upstreams.append(found)
    return NetworkPlan(msg.network, address, tuple(upstreams), tuple(sorted(set(msg.served_ports))),
                       host_address, spread)


@dataclass
class _Network:
    name: str
    fd: int
    outbound: asyncio.subprocess.Process | None = None
    tun_fd: int | None = None  # its device in a network that spans agents
    spread: str = ""  # that network's name (the same on every agent of it)
    members: set[str] = field(default_factory=set)
    upstreams: dict[tuple[str, int], Relay] = field(default_factory=dict)
    forwards: dict[str, list[Relay]] = field(default_factory=dict)  # per allocation


class TaskNetworks:
    """The namespaces of this agent's tasks, made on a task's start and removed with its last."""

    def __init__(self, addresses: list[str]) -> None:
        self._addresses = [a for a in addresses if not a.startswith("127.")]
        self._local = set(addresses)
        self._host_fd = netns.host_namespace_fd()
        self._networks: dict[str, _Network] = {}
        self._member_of: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._switch = overlay.OverlaySwitch()
        for name in netns.remove_stale():
            log.info("removed network namespace %s of an agent that is gone", name)

    async def start(self) -> int:
        """Opens the port where other agents send this one the packets of spread networks."""
        return await self._switch.start()

    def plan(self, msg: StartTask, master_url: str, env: dict[str, str]) -> NetworkPlan | None:
        return plan(msg, master_url, env, self._local)

    async def join(self, allocation_id: str, wanted: NetworkPlan) -> int:
        """Put the allocation in its network (made if it is the first there); returns the
        namespace's fd for setns. Raises OSError or NetnsError saying what could not be set up."""
        async with self._lock:
            net = self._networks.get(wanted.group)
            if net is None:
                net = await self._make()
                self._networks[wanted.group] = net
            net.members.add(allocation_id)
            self._member_of[allocation_id] = wanted.group
            try:
                if wanted.overlay is not None and net.tun_fd is None:
                    net.tun_fd = await netns.add_tun(net.name, net.fd, self._host_fd, overlay.DEVICE, wanted.address,
                                                     overlay.PREFIX_LENGTH, overlay.device_mtu(wanted.overlay))
                    self._switch.attach(wanted.group, net.tun_fd, wanted.overlay)
                    net.spread = wanted.group
                for host, port in wanted.upstreams:
                    if (host, port) not in net.upstreams:
                        net.upstreams[(host, port)] = await self._relay_in(net, host, port)
                forwards = net.forwards.setdefault(allocation_id, [])
                for port in wanted.served:  # each kept as made: a later failure closes it with the rest
                    forwards.append(await self._forward(net, wanted.listen_address, wanted.address, port))
            except BaseException:
                await self._leave_locked(allocation_id)
                raise
            return net.fd

    async def leave(self, allocation_id: str) -> None:
        async with self._lock:
            await self._leave_locked(allocation_id)

    async def close(self) -> None:
        async with self._lock:
            for allocation_id in list(self._member_of):
                await self._leave_locked(allocation_id)
            self._switch.close()

    # -- internals -------------------------------------------------------------------------------
    async def _make(self) -> _Network:
        name = f"det-{os.getpid()}-{next(_NAMES)}"
        fd = await netns.create(name, self._addresses)
        net = _Network(name, fd)
        try:
            net.outbound = await netns.start_outbound(name)
        except BaseException:
            await self._remove(net)
            raise
        return net

    async def _leave_locked(self, allocation_id: str) -> None:
        group = self._member_of.pop(allocation_id, None)
        net = self._networks.get(group) if group is not None else None
        if group is None or net is None:
            return
        net.members.discard(allocation_id)
        for relay in net.forwards.pop(allocation_id, []):
            await relay.close()
        if not net.members:
            del self._networks[group]
            await self._remove(net)

    async def _remove(self, net: _Network) -> None:
        for relay in net.upstreams.values():
            await relay.close()
        if net.tun_fd is not None:
            self._switch.detach(net.spread)
            with contextlib.suppress(OSError):
                os.close(net.tun_fd)
        if net.outbound is not None:
            await netns.stop_outbound(net.outbound)
        with contextlib.suppress(OSError):
            os.close(net.fd)
        await netns.delete(net.name)

    def _inside(self, net: _Network) -> socket.socket:
        return netns.socket_in(net.fd, self._host_fd)

    async def _relay_in(self, net: _Network, host: str, port: int) -> Relay:
        """Inside at (host, port), out to the same endpoint on the host."""
        listener = listening_socket(self._inside(net), host, port)

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection(host, port)

        relay = Relay(listener, connect, f"{net.name}: to {host}:{port}")
        await relay.start()
        return relay

    async def _forward(self, net: _Network, on_host: str, inside: str, port: int) -> Relay:
        """On the host at (on_host, port), into the namespace at (inside, port)."""
        try:
            listener = listening_socket(socket.socket(socket.AF_INET, socket.SOCK_STREAM), on_host, port)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot forward {on_host}:{port} to the task: {exc.strerror}") from None

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await open_with(self._inside(net), inside, port)

        relay = Relay(listener, connect, f"{net.name}: from {on_host}:{port}", patience_s=FORWARD_PATIENCE_S)
        await relay.start()
        return relay


def task_networks(mode: str, addresses: list[str]) -> TaskNetworks | None:
    """The agent's TaskNetworks for ``--task-network`` ``mode`` (auto, isolated, host), or None for
    the host's network; raises SystemExit when ``isolated`` cannot be had."""
    if mode == "host":
        log.warning("--task-network host: tasks share this host's network and can reach each other's ports")
        return None
    why = netns.available()
    if why is None and netns.slirp_path() is None:
        why = "slirp4netns is not installed (apt-get install slirp4netns)"
    if why is not None:
        if mode == "isolated":
            raise SystemExit(f"det-agent: --task-network isolated: {why}")
        log.warning("tasks share this host's network (%s): one task can reach another's ports; "
                    "their servers still demand the task's secret or key", why)
        return None
    log.info("each job's tasks run in a network of their own, reaching out through slirp4netns")
    return TaskNetworks(addresses)
