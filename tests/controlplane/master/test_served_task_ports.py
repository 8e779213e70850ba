"""A notebook's JupyterLab and a TensorBoard, run as plain processes from the very command and
environment the master sends their agent, listen where only the master's proxy goes and answer
only the proxy: a process that connects straight to the port (as another task on the host would)
is refused, a Jupyter terminal included, while the same request through the proxy's listener
works."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from controlplane.master import proxy_sessions as task_proxy
from controlplane.master.app import create_proxy_app
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_task_proxy import on_task_host, served
from tests.support.deadline import bounded

pytestmark = pytest.mark.timeout(180)


@asynccontextmanager
async def task_process(start: wire.StartTask, home: Path, **env: str) -> AsyncIterator[str]:
    """The task's command (what follows the agent's wrapper) as a plain process with the task's
    environment; yields the task's ``http://address:port`` once something listens there."""
    home.mkdir(exist_ok=True)
    # An agent runs tasks as nobody; this test may run as root, which Jupyter refuses unless told.
    (home / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
    full = {**os.environ, **start.env, **env, "HOME": str(home), "JUPYTER_RUNTIME_DIR": str(home / "rt"),
            "JUPYTER_CONFIG_DIR": str(home),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    address = f"http://{start.env['PAI_CONTAINER_HOST_IP']}:{start.env['PAI_CONTAINER_HOST_http_PORT_LIST']}"
    proc = await asyncio.create_subprocess_exec("bash", "-c", start.entrypoint[-1], env=full, cwd=home,
                                                start_new_session=True, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        deadline = asyncio.get_running_loop().time() + bounded(120)
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                assert proc.returncode is None, (await proc.stderr.read()).decode()[-3000:]  # type: ignore[union-attr]
                try:
                    await client.get(address)
                    break
                except httpx.TransportError:
                    assert asyncio.get_running_loop().time() < deadline, "the task never listened"
                    await asyncio.sleep(0.2)
        yield address
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()


def through_proxy(api: Any) -> httpx.AsyncClient:
    """A client of the proxy's own listener, signed in as the test's user (a bearer token), on each
    task's own host."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=cast(Any, create_proxy_app(api.rt))), base_url="http://proxy",
                             headers={"Authorization": api.headers["Authorization"]}, timeout=30,
                             event_hooks={"request": [on_task_host]})


async def started(api: Any, kind: str, body: dict) -> tuple[str, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    r = await api.post(f"/api/v1/{kind}s", json=body)
    assert r.status_code == 200, r.text
    task_id = r.json()[kind]["id"]
    while True:  # the agent may be given the experiment's trial first
        start = await agent.next_message()
        if isinstance(start, wire.StartTask) and start.env.get("DET_TASK_TYPE") == "PAI":
            break
    await agent.start(start)
    return task_id, start


async def test_a_notebooks_port_refuses_other_tasks_and_answers_the_proxy(api, tmp_path):
    nb, start = await started(api, "notebook", {"config": {}})
    assert start.env["PAI_CONTAINER_HOST_IP"] == "127.0.0.1"  # the agent's address: loopback here
    assert start.env[task_proxy.SECRET_ENV] not in start.entrypoint[-1]  # not on the command line
    async with task_process(start, tmp_path / "nb") as address, httpx.AsyncClient(base_url=address,
                                                                                   timeout=30) as other:
        # Another task of the host, straight to the port: no status, no terminal, no guessing.
        r = await other.get(f"/proxy/{nb}/api/status")
        assert r.status_code == 403, r.text
        r = await other.post(f"/proxy/{nb}/api/terminals", headers={"Origin": address})
        assert r.status_code == 403, r.text
        r = await other.get(f"/proxy/{nb}/api/status", headers={"Authorization": "token wrong"})
        assert r.status_code == 403, r.text
        async with through_proxy(api) as proxy:
            r = await proxy.get(f"/proxy/{nb}/api/status")
            assert r.status_code == 200 and "started" in r.json(), r.text
            r = await proxy.get(f"/proxy/{nb}/api/terminals")
            assert r.status_code == 200 and r.json() == [], r.text  # none was made by the refused POST


async def test_a_tensorboards_port_refuses_other_tasks_and_answers_the_proxy(api, tmp_path):
    experiment = await create_experiment(api, CONFIG)
    async with served(api._transport.app) as port:  # the task reads its experiments' metrics here
        board, start = await started(api, "tensorboard", {"experimentIds": [experiment]})
        async with task_process(start, tmp_path / "tb", DET_MASTER=f"http://127.0.0.1:{port}") as address, \
                httpx.AsyncClient(base_url=address, timeout=30) as other:
            r = await other.get(f"/proxy/{board}/data/environment")
            assert r.status_code == 403, r.text
            async with through_proxy(api) as proxy:
                r = await proxy.get(f"/proxy/{board}/data/environment")
                assert r.status_code == 200 and "data_location" in r.json(), r.text
                # No data server of its own (another loopback port, with no secret) behind it.
                assert "Grpc" not in r.json()["debug"]["data_provider"], r.json()["debug"]
