"""The relay's close() ends its connections and passes on a cancel of its own: before, it
swallowed every CancelledError while it waited for its connections, its caller's included, so a
cancelled agent shutdown went on as if nobody had asked it to stop."""

from __future__ import annotations

import asyncio
import socket

from agent_image.agent.tcp_relay import Relay, listening_socket


async def test_a_cancelled_close_is_cancelled_and_its_connections_end():
    far = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    far_port = far.sockets[0].getsockname()[1]
    relay = Relay(listening_socket(socket.socket(), "127.0.0.1", 0),
                  lambda: asyncio.open_connection("127.0.0.1", far_port), "test relay")
    await relay.start()
    _, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    async with asyncio.timeout(10):
        while not relay._connections:  # the relay has taken the connection
            await asyncio.sleep(0.01)
    connection = next(iter(relay._connections))

    closing = asyncio.create_task(relay.close())
    await asyncio.sleep(0)  # close() has cancelled the connection and waits for it
    closing.cancel()
    async with asyncio.timeout(10):
        await asyncio.wait({closing})
    assert closing.cancelled(), "close() swallowed the cancel of its caller"
    async with asyncio.timeout(10):
        await asyncio.wait({connection})
    assert connection.done()
    writer.close()
    far.close()
    await relay.close()
