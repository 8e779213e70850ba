"""The master's two listeners, served by uvicorn in one event loop: its API and pages on
``host:port``, and the task proxy (``/proxy/...`` alone, ``app.create_proxy_app``) on
``host:proxy_port``, whose tasks each have a host of their own (``task_hosts.py``), so a
notebook's page never runs with the master's authority. ``proxy_port: 0`` (the default) picks a
free port the first time and records it (``PROXY_PORT_FILE`` in the data dir, 0600); each later
start takes the same port, so bookmarks and open tabs keep working. If that port is taken by then,
the master logs a warning naming both, listens on a free port and records that one instead.
The API's server owns the runtime (its lifespan) and the signals; the proxy's stops after it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from pathlib import Path

import uvicorn

from controlplane.master.settings import MasterSettings

log = logging.getLogger("controlplane.master")

PROXY_PORT_FILE = "proxy_port"  # in the data dir: the port proxy_port 0 picked, taken again at each start

SERVER_OPTIONS = {"log_level": "warning", "access_log": False, "ws_ping_interval": 10, "ws_ping_timeout": 20,
                  "timeout_graceful_shutdown": 5}


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and accepted
    # connections inherit it; without it every answer waited out Nagle and delayed ACKs (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def recorded_proxy_port(data_dir: Path) -> int:
    """The proxy port a previous start recorded, or 0 (none, or unreadable)."""
    try:
        value = int((data_dir / PROXY_PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return 0
    return value if 0 < value < 65536 else 0


def record_proxy_port(data_dir: Path, port: int) -> None:
    """Remember ``port`` for the next start (owner-only file; a failure costs only the next start's port)."""
    path = data_dir / PROXY_PORT_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{port}\n")
        os.replace(path.with_suffix(".tmp"), path)
    except OSError as e:
        log.warning("cannot record the task proxy's port in %s: %s", path, e)


def _bind_proxy(settings: MasterSettings) -> socket.socket:
    """The proxy's socket: ``proxy_port`` when set; else the recorded port when it is free, else a
    free one (recorded)."""
    if settings.proxy_port:
        return _bind(settings.host, settings.proxy_port)
    recorded = recorded_proxy_port(settings.data_dir)
    sock = None
    if recorded:
        try:
            sock = _bind(settings.host, recorded)
        except OSError as e:
            log.warning("the task proxy's port %d (recorded in %s) is taken (%s): listening on another, and "
                        "links to the old port stop working", recorded, settings.data_dir / PROXY_PORT_FILE,
                        e.strerror or e)
    if sock is None:
        sock = _bind(settings.host, 0)
    port = int(sock.getsockname()[1])
    if port != recorded:
        record_proxy_port(settings.data_dir, port)
    return sock


class Listeners:
    """Both listeners of one master: bound on construction (so their ports are known), served by
    ``serve()``, stopped by ``stop()`` (from any thread)."""

    def __init__(self, settings: MasterSettings) -> None:
        from controlplane.master.app import create_app, create_proxy_app

        self.settings = settings
        self.api_sock = _bind(settings.host, settings.port)
        try:
            self.proxy_sock = _bind_proxy(settings)
        except OSError:
            self.api_sock.close()
            raise
        settings.port = self.api_sock.getsockname()[1]
        self.app = create_app(settings)
        self.app.state.runtime.proxy_port = self.proxy_port
        self.proxy_app = create_proxy_app(self.app.state.runtime)
        self.api = uvicorn.Server(uvicorn.Config(self.app, **SERVER_OPTIONS))  # type: ignore[arg-type]
        self.proxy = uvicorn.Server(uvicorn.Config(self.proxy_app, **SERVER_OPTIONS))  # type: ignore[arg-type]
        self.proxy.capture_signals = contextlib.nullcontext  # type: ignore[assignment]  # the API server has them
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def port(self) -> int:
        return self.settings.port

    @property
    def proxy_port(self) -> int:
        return int(self.proxy_sock.getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"http://{host}:{self.port}"

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        api = asyncio.create_task(self.api.serve(sockets=[self.api_sock]))
        while not self.api.started and not api.done():
            await asyncio.sleep(0.02)
        proxy = asyncio.create_task(self.proxy.serve(sockets=[self.proxy_sock]))
        while not self.proxy.started and not proxy.done():
            await asyncio.sleep(0.02)
        if self.api.started and self.proxy.started:
            log.info("master API on port %d; task proxy on port %d", self.port, self.proxy_port)
            self._started.set()
        try:
            await api
        finally:
            self.proxy.should_exit = True
            await proxy
            self.api_sock.close()
            self.proxy_sock.close()

    def run(self) -> None:
        """Serve until stopped, on the event loop ``uvicorn.run`` would pick (uvloop where installed)."""
        with asyncio.Runner(loop_factory=self.api.config.get_loop_factory()) as runner:
            runner.run(self.serve())

    def wait_started(self, timeout: float) -> None:
        if not self._started.wait(timeout):
            raise TimeoutError(f"the master's listeners did not start in {timeout:.0f} s")

    def stop(self) -> None:
        self.api.should_exit = True
