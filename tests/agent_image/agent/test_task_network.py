"""Each job's tasks run in a network of their own (``task_network.py``): a real ``det-agent``
under bubblewrap, as root, with iproute2 and slirp4netns (what ``scripts/setup.sh`` installs).

What another user's task could do on a shared host network (scan the host's ports and reach a
notebook's, a TensorBoard's or a rendezvous server) it cannot do here: it finds nothing of another
job, while the tasks of one job reach each other, every task reaches the master, and the agent's
forwards bring the master's proxy (here: this test) to the ports the master booked for a task.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
from pathlib import Path

import pytest

from agent_image.agent.task_network import plan
from controlplane.wire.agent_protocol import Overlay, OverlayMember, StartTask
from tests.support.cluster import free_port

from .conftest import JOIN_TOKEN, AgentFactory
from .fake_master import FakeMaster
from .test_agent_integration import exited, lines_of, start_task

SERVER_PY = """\
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen()
    while True:
        c, _ = s.accept(); c.sendall(f"job-a:{port}\\n".encode()); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
import time; time.sleep(0.5); print("LISTENING", flush=True); time.sleep(3600)
"""

# Tries each endpoint; prints what it got: the first line it read, or the error's name.
PROBE_PY = """\
import json, socket, sys
found = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as c:
            c.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
            found[target] = c.recv(100).decode(errors="replace").splitlines()[0]
    except OSError as e:
        found[target] = type(e).__name__
print("FOUND " + json.dumps(found), flush=True)
"""

needs_isolation = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(b) for b in ("bwrap", "ip", "slirp4netns")),
    reason="a task network needs root, bubblewrap, iproute2 and slirp4netns (scripts/setup.sh installs them)")


def _task(master: FakeMaster, alloc: str, network: str, argv: list[str], files: dict[str, str],
          served: list[int] = ()) -> StartTask:  # type: ignore[assignment]
    msg = start_task(master, alloc, argv, files=files)
    msg.network, msg.served_ports, msg.container_addrs = network, list(served), ["127.0.0.1"]
    return msg


async def _probe(master: FakeMaster, alloc: str, network: str, targets: list[str],
                 overlay: Overlay | None = None) -> dict[str, str]:
    msg = _task(master, alloc, network, ["python3", "probe.py", *targets], {"probe.py": PROBE_PY})
    msg.overlay = overlay
    await master.send(msg)
    done = await master.wait_until(lambda: exited(master, alloc), timeout=60)
    lines = [ln.message for ln in lines_of(master, alloc)]
    assert done.exit_code == 0, lines
    return json.loads(next(m for m in lines if m.startswith("FOUND "))[len("FOUND "):])


def _from_host(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as c:
            return c.recv(100).decode().strip() or "closed"
    except OSError as e:
        return type(e).__name__


def _namespaces_of(pid: int) -> list[str]:
    netns = Path("/run/netns")
    return sorted(p.name for p in netns.iterdir() if p.name.startswith(f"det-{pid}-")) if netns.exists() else []


@needs_isolation
async def test_a_task_reaches_its_own_jobs_ports_and_the_master_but_nothing_of_another_job(
        master: FakeMaster, start_agent: AgentFactory) -> None:
    agent = start_agent(master)
    await master.wait_until(lambda: master.registers)
    served, internal = free_port(), free_port()  # a notebook's port, and a rendezvous server's
    master_port = master.url.rsplit(":", 1)[1]
    await master.send(_task(master, "alice", "job-a", ["python3", "server.py", str(served), str(internal)],
                            {"server.py": SERVER_PY}, served=[served]))
    await master.wait_until(lambda: any(ln.message == "LISTENING" for ln in lines_of(master, "alice")), timeout=60)
    assert len(_namespaces_of(agent.pid)) == 1

    targets = [f"127.0.0.1:{served}", f"127.0.0.1:{internal}", f"127.0.0.1:{master_port}"]
    # another task of alice's job: her servers and the master
    mate = await _probe(master, "alice-2", "job-a", targets)
    assert mate[targets[0]] == f"job-a:{served}" and mate[targets[1]] == f"job-a:{internal}"
    assert mate[targets[2]].startswith("HTTP/1")
    # bob's task: the master, and nothing of alice's, not even the port the agent forwards
    bob = await _probe(master, "bob", "job-b", targets)
    assert bob[targets[0]] == "ConnectionRefusedError" and bob[targets[1]] == "ConnectionRefusedError", bob
    assert bob[targets[2]].startswith("HTTP/1")
    # the host (where the master's proxy connects) reaches the booked port only
    assert _from_host(served) == f"job-a:{served}"
    assert _from_host(internal) == "ConnectionRefusedError"

    from controlplane.wire.agent_protocol import KillTask
    await master.send(KillTask(allocation_id="alice", grace_seconds=1))
    await master.wait_until(lambda: exited(master, "alice"), timeout=30)
    # the last task gone, so are its network and the forward
    await master.wait_until(lambda: not _namespaces_of(agent.pid), timeout=10)
    assert _from_host(served) == "ConnectionRefusedError"


def test_only_this_hosts_endpoints_are_relayed_and_only_for_a_named_network() -> None:
    msg = StartTask(allocation_id="a", task_id="t", task_type="TRIAL", entrypoint="x", env={}, slot_ids=[],
                    session_token="s", container_addrs=["10.0.0.5"], served_ports=[3, 2, 3],
                    trial_info={"config": {"checkpoint_storage": {"type": "s3", "endpoint_url": "http://localhost:9000"}}})
    env = {"STORAGE_EMULATOR_HOST": "127.0.0.1:4443", "AWS_ENDPOINT_URL": "https://s3.example.com"}
    assert plan(msg, "http://10.0.0.5:8080", env, {"127.0.0.1", "10.0.0.5"}) is None  # no network: the host's
    msg.network = "job"
    got = plan(msg, "http://10.0.0.5:8080", env, {"127.0.0.1", "10.0.0.5"})
    assert got is not None
    assert got.address == "10.0.0.5" and got.served == (2, 3)
    # the master and the storage endpoints on this host; the remote one goes out through slirp4netns
    assert got.upstreams == (("10.0.0.5", 8080), ("127.0.0.1", 9000), ("127.0.0.1", 4443))


@needs_isolation
async def test_a_task_whose_port_is_taken_on_the_host_leaves_no_forward_or_namespace_behind() -> None:
    from agent_image.agent.task_network import NetworkPlan, TaskNetworks

    nets = TaskNetworks(["127.0.0.1"])
    free, taken = free_port(), socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        wanted = NetworkPlan("job-c", "127.0.0.1", (), (free, taken.getsockname()[1]))
        with pytest.raises(OSError, match="cannot forward"):
            await nets.join("carol", wanted)
        assert _from_host(free) == "ConnectionRefusedError"  # the forward made first was closed
        assert not _namespaces_of(os.getpid())
    finally:
        taken.close()
        await nets.close()


@needs_isolation
async def test_a_gang_spread_over_two_agents_reaches_itself_and_nothing_else_reaches_it(
        master: FakeMaster, start_agent: AgentFactory, tmp_path: Path) -> None:
    """Its ranks reach every port of each other at their addresses in the gang's network; another
    task on the same agents, even one told the same addresses and agents' ports (but not the key),
    and the hosts themselves reach none of them."""
    second = FakeMaster(JOIN_TOKEN)
    await second.start()
    try:
        agent_a = start_agent(master)
        start_agent(second, "--agent-id", "agent-b", "--work-dir", str(tmp_path / "work-b"))
        await master.wait_until(lambda: master.registers)
        await second.wait_until(lambda: second.registers)
        udp = [master.registers[0].overlay_port, second.registers[0].overlay_port]
        assert all(udp), "an agent that makes task networks takes other agents' packets"
        members = [OverlayMember("100.96.0.1", "127.0.0.1", udp[0]), OverlayMember("100.96.0.2", "127.0.0.1", udp[1])]
        gang = Overlay(key=secrets.token_hex(32), members=members, index=0)
        port = free_port()  # never opened on a host: it listens in rank 0's namespace only
        chief = _task(master, "gang-0", "gang", ["python3", "server.py", str(port)], {"server.py": SERVER_PY})
        chief.overlay, chief.container_addrs = gang, ["100.96.0.1", "100.96.0.2"]
        await master.send(chief)
        await master.wait_until(lambda: any(ln.message == "LISTENING" for ln in lines_of(master, "gang-0")),
                                timeout=60)
        assert _namespaces_of(agent_a.pid), "rank 0 runs in a namespace of its own"

        target = f"100.96.0.1:{port}"
        rank1 = await _probe(second, "gang-1", "gang", [target],
                             Overlay(key=gang.key, members=members, index=1))
        assert rank1[target] == f"job-a:{port}", rank1
        # bob's task beside rank 1, in a network of the same name, addresses and agents' ports, with
        # a key of its own: what it sends is refused
        bob = await _probe(second, "bob", "gang", [target, f"127.0.0.1:{port}"],
                           Overlay(key=secrets.token_hex(32), members=members, index=1))
        assert bob[target] in ("TimeoutError", "OSError", "ConnectionRefusedError"), bob
        assert bob[f"127.0.0.1:{port}"] == "ConnectionRefusedError", bob
        assert _from_host(port) == "ConnectionRefusedError"
    finally:
        await second.stop()


async def test_a_client_of_a_forwarded_port_waits_for_a_server_still_starting() -> None:
    """`det shell start` connects once the task runs, maybe before its SSH server listens: the
    forward holds the connection until it does, rather than closing it (ssh then gave up)."""
    import asyncio

    from agent_image.agent.tcp_relay import Relay, listening_socket

    far_port = free_port()

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", far_port)

    relay = Relay(listening_socket(socket.socket(), "127.0.0.1", 0), connect, "test forward", patience_s=30)
    await relay.start()
    server = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        await asyncio.sleep(0.5)  # the server comes up after the client
        server = await asyncio.start_server(lambda r, w: w.write(b"SSH-2.0-task\r\n"), "127.0.0.1", far_port)
        assert await asyncio.wait_for(reader.readline(), 10) == b"SSH-2.0-task\r\n"
        writer.close()
    finally:
        await relay.close()
        if server is not None:
            server.close()
