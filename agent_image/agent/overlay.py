"""Task networks that span agents: the packets between one network's namespaces on several agents.

A gang or an OpenPAI job spread over agents gets a namespace on each of them (``task_network.py``)
with a tun device, ``det0``, at that agent's address in the network (``Overlay.members``, chosen by
the master). What a task sends to another member's address comes out of the tun here; the agent
signs it with the network's key and sends it, one packet per UDP datagram, to that member's agent,
which writes it into its own namespace once the signature checks out, it comes from a member's
address and is for its own. So the ranks of a gang reach every port of each other (collectives open
ports no one knows ahead), and nothing else reaches any: another task has no route into the
namespace, and neither it nor anyone on the network has the key.

A datagram is: the network's id (16 bytes, a digest of its name) | a tag (16 bytes of the
HMAC-SHA256 of the id and the packet under the key) | the IPv4 packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import socket
from dataclasses import dataclass

from controlplane.wire.agent_protocol import Overlay

log = logging.getLogger(__name__)

DEVICE = "det0"
PREFIX_LENGTH = 16  # the members' addresses share a /16 (controlplane/master/orchestration/spread_network.py)
# Variables that make collectives' libraries open their sockets on the network's device.
TASK_ENV = {"GLOO_SOCKET_IFNAME": DEVICE, "NCCL_SOCKET_IFNAME": DEVICE, "HOROVOD_GLOO_IFACE": DEVICE}
_ID, _TAG = 16, 16
_HEADER = _ID + _TAG
_CARRIED = 20 + 8 + _HEADER  # what a datagram adds to a packet: IPv4 and UDP headers, then ours
_IP_MTU_DISCOVER, _IP_PMTUDISC_DO, _IP_MTU = 10, 2, 14  # Linux's <linux/in.h>
MIN_MTU, MAX_MTU = 576, 65535 - _CARRIED
_SO_SNDBUFFORCE, _SO_RCVBUFFORCE = 32, 33  # root may go past net.core.[rw]mem_max
_SOCKET_BUFFER = 8 << 20


def path_mtu(host: str) -> int:
    """The largest IPv4 datagram this host sends to ``host`` unfragmented (its route's link MTU:
    65535 on loopback, 9001 within an AWS VPC); 1500 when it cannot be told."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
            s.connect((host, 9))
            return int(s.getsockopt(socket.IPPROTO_IP, _IP_MTU))
    except OSError:
        return 1500


def device_mtu(overlay: Overlay) -> int:
    """The tun's MTU: each packet it gives fits one unfragmented datagram to every other member."""
    paths = [path_mtu(m.host) for i, m in enumerate(overlay.members) if i != overlay.index] or [1500]
    return max(MIN_MTU, min(min(paths) - _CARRIED, MAX_MTU))


def network_id(name: str) -> bytes:
    return hashlib.sha256(b"det-overlay\0" + name.encode()).digest()[:_ID]


def _tag(key: bytes, net_id: bytes, packet: bytes) -> bytes:
    return hmac.new(key, net_id + packet, hashlib.sha256).digest()[:_TAG]


def seal(key: bytes, net_id: bytes, packet: bytes) -> bytes:
    return net_id + _tag(key, net_id, packet) + packet


@dataclass
class _Attached:
    name: str
    net_id: bytes
    tun_fd: int
    key: bytes
    own: bytes  # this agent's address in the network, packed
    routes: dict[bytes, tuple[str, int]]  # another member's address (packed) -> its agent's UDP endpoint


class OverlaySwitch(asyncio.DatagramProtocol):
    """This agent's end of every spread task network: one UDP socket, one tun per network."""

    def __init__(self) -> None:
        self._networks: dict[bytes, _Attached] = {}
        self._transport: asyncio.DatagramTransport | None = None
        self.dropped = 0  # datagrams refused (bad tag, unknown network, wrong addresses)

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> int:
        """Listens for other agents' datagrams; returns the port (``Register.overlay_port``)."""
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port),
                                                           family=socket.AF_INET)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        for force, plain in ((_SO_RCVBUFFORCE, socket.SO_RCVBUF), (_SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:  # a burst of a TCP window's packets waits here instead of being dropped
                sock.setsockopt(socket.SOL_SOCKET, force, _SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, _SOCKET_BUFFER)
        return int(transport.get_extra_info("sockname")[1])

    def attach(self, name: str, tun_fd: int, overlay: Overlay) -> None:
        """Carries network ``name``'s packets between ``tun_fd`` and the other members' agents."""
        me = overlay.members[overlay.index]
        net = _Attached(name, network_id(name), tun_fd, bytes.fromhex(overlay.key), socket.inet_aton(me.address),
                        {socket.inet_aton(m.address): (m.host, m.port)
                         for i, m in enumerate(overlay.members) if i != overlay.index})
        self._networks[net.net_id] = net
        asyncio.get_running_loop().add_reader(tun_fd, self._from_tun, net)

    def detach(self, name: str) -> None:
        net = self._networks.pop(network_id(name), None)
        if net is not None:
            asyncio.get_running_loop().remove_reader(net.tun_fd)

    def close(self) -> None:
        for net in list(self._networks.values()):
            self.detach(net.name)
        if self._transport is not None:
            self._transport.close()

    # -- the two directions ----------------------------------------------------------------------
    def _from_tun(self, net: _Attached) -> None:
        transport = self._transport
        for _ in range(64):  # then let the loop breathe; the reader fires again while packets wait
            try:
                packet = os.read(net.tun_fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("task network %s: reading its device failed: %s", net.name, exc)
                self.detach(net.name)
                return
            if len(packet) < 20 or packet[0] >> 4 != 4:  # IPv6 (router solicitations): not carried
                continue
            route = net.routes.get(packet[16:20])
            if route is not None and transport is not None:
                transport.sendto(seal(net.key, net.net_id, packet), route)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        net = self._networks.get(data[:_ID])
        packet = data[_HEADER:]
        if (net is None or len(packet) < 20 or packet[0] >> 4 != 4 or packet[16:20] != net.own
                or packet[12:16] not in net.routes
                or not hmac.compare_digest(data[_ID:_HEADER], _tag(net.key, net.net_id, packet))):
            self.dropped += 1
            return
        with contextlib.suppress(BlockingIOError, OSError):  # a full queue drops, as a link would
            os.write(net.tun_fd, packet)

    def error_received(self, exc: Exception) -> None:
        log.debug("task networks: %s", exc)
