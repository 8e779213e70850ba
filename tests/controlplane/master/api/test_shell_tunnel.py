"""The master's ``ws://master/proxy/{shell_id}/``, the tunnel Determined's ssh ProxyCommand
(``python -m determined.cli.tunnel``) opens without credentials: bytes go both ways to a running
shell's SSH server and nowhere else; and a shell's task is ready once that server answers."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from websockets.asyncio.client import connect as ws_connect

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent
from tests.controlplane.master.test_task_proxy import closed_with, served

BANNER = b"SSH-2.0-fake\r\n"


@asynccontextmanager
async def fake_sshd(host: str, port: int):
    """Says an SSH banner, then echoes what it reads."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(BANNER)
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, port)
    try:
        yield
    finally:
        server.close()


async def test_a_running_shell_is_reached_through_the_tunnel_and_ready_once_its_sshd_answers(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    shell = (await api.post("/api/v1/shells", json={"config": {}})).json()["shell"]
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    [address] = (await api.get(f"/api/v1/shells/{shell['id']}")).json()["shell"]["addresses"]
    task = (await api.get(f"/api/v1/tasks/{shell['id']}")).json()["task"]
    assert task["allocations"][0]["state"] == "STATE_RUNNING" and not task["allocations"][0]["isReady"]
    async with fake_sshd(address["hostIp"], address["hostPort"]), served(api._transport.app) as port:
        task = (await api.get(f"/api/v1/tasks/{shell['id']}")).json()["task"]
        assert task["taskType"] == "TASK_TYPE_SHELL" and task["allocations"][0]["isReady"]
        # no credentials: SSH authenticates whoever comes through
        async with ws_connect(f"ws://127.0.0.1:{port}/proxy/{shell['id']}/", open_timeout=10) as ws:
            assert await asyncio.wait_for(ws.recv(), 10) == BANNER
            await ws.send(b"\x00ssh bytes")
            assert await asyncio.wait_for(ws.recv(), 10) == b"\x00ssh bytes"

        code, reason = await closed_with(f"ws://127.0.0.1:{port}/proxy/00000000-0000-0000-0000-000000000000/")
        assert code == 4404 and "no running shell" in reason, reason
        notebook = (await api.post("/api/v1/notebooks", json={"config": {}})).json()["notebook"]
        code, _ = await closed_with(f"ws://127.0.0.1:{port}/proxy/{notebook['id']}/")
        assert code == 4404  # a notebook's port is the proxy's business, never a raw tunnel
        await api.post(f"/api/v1/shells/{shell['id']}/kill")
        await agent.exit(start.allocation_id, 137)
        code, _ = await closed_with(f"ws://127.0.0.1:{port}/proxy/{shell['id']}/")
        assert code == 4404  # an ended shell is no longer reached
