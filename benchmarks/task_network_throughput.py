"""Throughput between two tasks of a gang spread over two agents, in the gang's own network.

Two agents' task networks (``agent_image/agent/task_network.py``, each with its own UDP carrier,
``overlay.py``) in this process, as root: a namespace for rank 0 at 100.96.0.1 and one for rank 1 at
100.96.0.2, joined by the carriers over loopback. Rank 1 sends --mb MB over one TCP connection to
rank 0, --reps times; the median MB/s beside the same transfer over the host's loopback (what a gang
on the host network gets on one machine). Both carriers share this process's one event loop, so the
figure is a floor: on two machines each agent carries only its own end.

No target: it says what the isolation costs a spread gang's socket traffic (rendezvous, bootstrap,
gloo); NCCL over InfiniBand or NVLink does not pass through it.

    .venv/bin/python benchmarks/task_network_throughput.py
    .venv/bin/python benchmarks/task_network_throughput.py --mb 4 --reps 1   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_image.agent import netns
from agent_image.agent.task_network import NetworkPlan, TaskNetworks
from controlplane.wire.agent_protocol import Overlay, OverlayMember

CHUNK = 256 * 1024


def _serve(listener: socket.socket, total: int, got: list[int]) -> None:
    conn, _ = listener.accept()
    with conn:
        n = 0
        while n < total:
            data = conn.recv(CHUNK)
            if not data:
                break
            n += len(data)
        conn.sendall(b"k")
        got.append(n)


def _transfer(server: socket.socket, client: socket.socket, address: tuple[str, int], total: int) -> float:
    """MB/s of ``total`` bytes sent from ``client`` to ``server`` (listening at ``address``)."""
    got: list[int] = []
    thread = threading.Thread(target=_serve, args=(server, total, got))
    thread.start()
    payload = b"x" * CHUNK
    start = time.perf_counter()
    client.settimeout(120)
    client.connect(address)
    sent = 0
    while sent < total:
        client.sendall(payload)
        sent += len(payload)
    client.recv(1)
    elapsed = time.perf_counter() - start
    client.close()
    thread.join()
    if not got or got[0] < total:
        raise SystemExit(f"the transfer stopped at {got[0] if got else 0} of {total} bytes")
    return total / elapsed / 1e6


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=64)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    why = netns.available() or (None if netns.slirp_path() else "slirp4netns is not installed")
    if why is not None:
        raise SystemExit(f"task networks cannot be made here: {why}")
    total = int(args.mb * 1e6) // CHUNK * CHUNK
    agents = [TaskNetworks(["127.0.0.1"]), TaskNetworks(["127.0.0.1"])]
    ports = [await a.start() for a in agents]
    members = [OverlayMember("100.96.0.1", "127.0.0.1", ports[0]), OverlayMember("100.96.0.2", "127.0.0.1", ports[1])]
    key = secrets.token_hex(32)
    host_fd = netns.host_namespace_fd()
    fds = [await agents[i].join(f"rank-{i}", NetworkPlan("gang", members[i].address, (), (), "127.0.0.1",
                                                         Overlay(key=key, members=members, index=i)))
           for i in range(2)]
    overlay, loopback = [], []
    try:
        for _ in range(args.reps):
            listener = netns.socket_in(fds[0], host_fd)
            listener.bind(("100.96.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            overlay.append(await asyncio.to_thread(_transfer, listener, netns.socket_in(fds[1], host_fd),
                                                   ("100.96.0.1", port), total))
            listener.close()
            plain = socket.socket()
            plain.bind(("127.0.0.1", 0))
            plain.listen()
            loopback.append(await asyncio.to_thread(_transfer, plain, socket.socket(), plain.getsockname(), total))
            plain.close()
    finally:
        for i, a in enumerate(agents):
            await a.leave(f"rank-{i}")
            await a.close()
        os.close(host_fd)
    spread, host = statistics.median(overlay), statistics.median(loopback)
    print(f"{'path':<44} {'MB/s (median of ' + str(args.reps) + ')':>22}")
    print(f"{'spread gang network (two carriers, one loop)':<44} {spread:>22.1f}")
    print(f"{'host loopback (no isolation)':<44} {host:>22.1f}")
    print(f"transferred {total / 1e6:.0f} MB per run")
    print(f"task_network_mb_per_s={spread:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
