"""An in-process master (Litestar test client) on a fresh SQLite or PostgreSQL database.

``api`` serves this process's one app over a runtime of the test's own, on a copy of a migrated
database with the default users (``master_db_url``): tests/support/master_app.py says why.

``fake_agent`` plays an agent's part through the orchestrator's own entry points, so the
trial lifecycle can be driven step by step without processes.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import yaml

from controlplane.master.agent_hub import AgentConnection
from controlplane.master.app import start_runtime, stop_runtime
from controlplane.master.settings import MasterSettings
from controlplane.wire import agent_protocol as wire
from tests.support.master_app import app_with_runtime, release

JOIN_TOKEN = "test-join-token"

CONFIG = {
    "name": "unit",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
    "searcher": {"name": "random", "metric": "loss", "smaller_is_better": True, "max_trials": 2,
                 "max_concurrent_trials": 2, "max_length": {"batches": 10}},
    "reproducibility": {"experiment_seed": 7},
    "max_restarts": 1,
}


@pytest.fixture
async def api(master_db_url, tmp_path):
    """The app, its runtime and the test share one event loop (the orchestrator's lock and
    queues are loop-bound), so the runtime is started here rather than by a test client."""
    # A fake agent's trial exits when its test says so, which on a loaded machine can be seconds
    # after a pause or a searcher's Stop: the preemption timeout must not fire in between (its
    # kill would come out of next_message instead of the message the test waits for).
    settings = MasterSettings(data_dir=tmp_path / "master", db_url=master_db_url, join_token=JOIN_TOKEN,
                              agent_reconnect_wait_s=1.0, preemption_timeout_s=600.0)
    app = app_with_runtime(settings)
    rt = app.state.runtime
    await start_runtime(rt)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://master",
                                     timeout=30) as client:
            client.rt = rt
            r = await client.post("/api/v1/auth/login", json={"username": "determined", "password": ""})
            assert r.status_code == 200, r.text
            client.headers["Authorization"] = f"Bearer {r.json()['token']}"
            yield client
    finally:
        await release(app)
        await stop_runtime(rt)


async def create_experiment(api, config: dict | None = None, files: dict[str, str] | None = None,
                            **extra) -> int:
    import base64

    model_def = [{"path": p, "type": 48, "content": base64.b64encode(c.encode()).decode(), "mtime": "0",
                  "uid": 0, "gid": 0, "mode": 0o644} for p, c in (files or {"train.py": "print('hi')\n"}).items()]
    body = {"config": yaml.safe_dump(config or CONFIG), "modelDefinition": model_def, **extra}
    r = await api.post("/api/v1/experiments", json=body)
    assert r.status_code == 200, r.text
    return r.json()["experiment"]["id"]


async def one_running_trial(api) -> tuple[FakeAgent, wire.StartTask, int]:
    """A one-trial experiment started on a new one-slot agent: the agent, its StartTask, the trial id."""
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})  # type: ignore[dict-item]
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask), start
    await agent.start(start)
    return agent, start, int(start.env["DET_TRIAL_ID"])


class FakeAgent:
    """Registers with the orchestrator and records what the master sends it."""

    def __init__(self, rt, agent_id: str = "agent-1", slots: int = 2, pool: str = "default",
                 environments: tuple[str, ...] = (wire.DEFAULT_ENVIRONMENT,), cpus: int = 0,
                 address: str = "127.0.0.1") -> None:
        """``cpus``: what it reports in Register.cpus (0: nothing, as an older agent); ``address``: its host's."""
        self.rt = rt
        self.agent_id = agent_id
        self.pool = pool
        self.slots = [wire.Slot(id=i, type="cpu") for i in range(slots)]
        self.environments = environments
        self.cpus = cpus
        self.address = address
        self.conn: AgentConnection | None = None

    async def register(self, running: list[str] | None = None) -> wire.Registered:
        self.conn = AgentConnection(agent_id=self.agent_id, pool=self.pool, slots=self.slots,
                                    running_at_register=frozenset(running or []), environments=self.environments,
                                    cpus=self.cpus, address=self.address)
        reg = wire.Register(agent_id=self.agent_id, slots=self.slots, pool=self.pool, running=running or [],
                            environments=list(self.environments), cpus=self.cpus)
        return await self.rt.orchestrator.agent_registered(self.conn, reg)

    async def next_message(self, timeout: float = 10.0) -> wire.MasterMessage:
        self.rt.orchestrator.wake()
        return await asyncio.wait_for(self.conn.outbox.get(), timeout)

    async def start(self, msg: wire.StartTask) -> None:
        await self.rt.orchestrator.task_started(self.agent_id, wire.TaskStarted(msg.allocation_id, 4242, 0.0))

    async def exit(self, allocation_id: str, code: int | None) -> None:
        await self.rt.orchestrator.task_exited(self.agent_id, wire.TaskExited(allocation_id, code))

    async def disconnect(self) -> None:
        await self.rt.orchestrator.agent_disconnected(self.conn)
