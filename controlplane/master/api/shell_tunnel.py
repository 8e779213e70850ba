"""``ws://master/proxy/{shell_id}/``: a TCP tunnel to a running shell's SSH server, on the master's
own listener, as Determined's master serves it.

Determined's `det shell start`, `det shell open` and the command `det shell show-ssh-command`
prints reach a shell with ``ssh -o ProxyCommand="python -m determined.cli.tunnel MASTER %h" ...
USER@SHELL_ID``: the tunnel opens this WebSocket and carries the SSH stream in binary frames both
ways (text frames are taken as their UTF-8 bytes). The tunnel signs nothing in (Determined's runs
unauthenticated), so neither does this route: SSH authenticates, the shell's server trusting only
the shell's own key, which the master gives only to its owner or an admin. Nothing but a running
shell's SSH port is reached: any other id (another kind of task, an ended shell, no such task) is
accepted and closed at once with 4404 before anything is connected; an SSH server that cannot be
reached closes it with 4502. Either side closing ends both.
"""

from __future__ import annotations

import asyncio
import logging
import re

from litestar import websocket

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.task_proxy import PATHS, _close_quietly, _refuse
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyWebSocket
from controlplane.master.services import commands

log = logging.getLogger("controlplane.master.shell_tunnel")

SHELL_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")
CONNECT_TIMEOUT_S = 10.0
CHUNK = 64 * 1024


@websocket(PATHS, name="shell-tunnel", opt=opt(Action.PUBLIC))
async def shell_tunnel(socket: AnyWebSocket, task_id: str) -> None:
    # Action.PUBLIC: no sign-in (see the module docstring); SSH authenticates the client.
    target = await commands.shell_target(runtime_of(socket), task_id) if SHELL_ID.fullmatch(task_id) else None
    if target is None:
        await _refuse(socket, 4404, f"no running shell {task_id[:64]}")
        return
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*target), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as e:
        await _refuse(socket, 4502, f"shell {task_id} is not reachable: {e}")
        return
    try:
        await socket.accept()

        async def to_shell() -> None:
            while True:
                event = await socket.receive()
                if event["type"] == "websocket.disconnect":
                    return
                raw, text = event.get("bytes"), event.get("text")
                data = raw if isinstance(raw, bytes) else text.encode() if isinstance(text, str) else b""
                if data:
                    writer.write(data)
                    await writer.drain()

        async def to_client() -> None:
            while chunk := await reader.read(CHUNK):
                await socket.send_bytes(chunk)

        pumps = [asyncio.create_task(to_shell()), asyncio.create_task(to_client())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        await _close_quietly(socket, 1000)
    finally:
        writer.close()


ROUTES = [shell_tunnel]
