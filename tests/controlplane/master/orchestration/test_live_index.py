"""The orchestrator finds an agent's live allocations through its in-memory index (agent -> the
allocations that may be live there), read back from the database when the master starts: after a
restart, the work of an agent that comes back without it, or never comes back, must still run again.
The index may name more than is live (the database decides) but never less, even when a placement
and the read that found its id ended race in one transaction.
"""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import update

from controlplane.common.timeutil import utcnow
from controlplane.master.app import start_runtime, stop_runtime
from controlplane.master.db.models import Allocation
from controlplane.master.orchestration.live_index import LiveIndex
from controlplane.master.orchestration.orphans import ORPHAN_GRACE_S
from controlplane.master.settings import MasterSettings
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import JOIN_TOKEN, FakeAgent, create_experiment
from tests.support.master_app import app_with_runtime, release


def test_an_id_read_ended_is_dropped_after_the_commit_unless_it_was_placed_again_since():
    index = LiveIndex()
    index.add("t.1", ["a", "b"])  # a gang on two agents
    index.add("u.1", ["a"])
    seen_at = index.adds
    index.add("u.1", ["a"])  # placed again after the read that found it not live
    index.drop({"t.1", "u.1"}, seen_at)
    assert index.ids_on(["a", "b"]) == {"u.1"} and len(index) == 1


@pytest.fixture
async def masters(master_db_url, tmp_path):
    """Starts a master (and again, on the same database after ``stop``)."""
    running: list = []

    async def start() -> httpx.AsyncClient:
        settings = MasterSettings(data_dir=tmp_path / "master", db_url=master_db_url, join_token=JOIN_TOKEN,
                                  agent_reconnect_wait_s=1.0, preemption_timeout_s=600.0)
        app = app_with_runtime(settings)
        await start_runtime(app.state.runtime)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://master", timeout=30)
        client.rt = app.state.runtime  # type: ignore[attr-defined]
        running.append((app, client))
        r = await client.post("/api/v1/auth/login", json={"username": "determined", "password": ""})
        client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        return client

    async def stop(client: httpx.AsyncClient) -> None:
        app = next(a for a, c in running if c is client)
        running.remove((app, client))
        await release(app)
        await stop_runtime(client.rt)  # type: ignore[attr-defined]
        await client.aclose()

    yield start, stop
    for _, client in list(running):
        await stop(client)


async def test_after_a_restart_work_an_agent_forgot_or_never_came_back_for_runs_again(masters):
    start, stop = masters
    api = await start()
    a1, a2 = FakeAgent(api.rt, "agent-1", slots=1), FakeAgent(api.rt, "agent-2", slots=1)
    await a1.register()
    await a2.register()
    await create_experiment(api)  # two trials, one on each agent
    m1, m2 = await a1.next_message(), await a2.next_message()
    assert isinstance(m1, wire.StartTask) and isinstance(m2, wire.StartTask)
    await a1.start(m1)
    await a2.start(m2)
    await stop(api)
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Allocation).values(assigned_at=utcnow() - timedelta(hours=1)))

    api = await start()  # nothing in memory: what runs where is read back from the database
    a1 = FakeAgent(api.rt, "agent-1", slots=2)
    await a1.register(running=[])  # its machine restarted: its task died with it
    assert a1.conn is not None
    a1.conn.registered_at -= ORPHAN_GRACE_S + 1
    api.rt.hub.clock = lambda: time.monotonic() + 3600  # agent-2's window is long over
    started: dict[str, str] = {}
    while len(started) < 2:
        msg = await a1.next_message()
        if isinstance(msg, wire.StartTask):
            started[msg.env["DET_TRIAL_ID"]] = msg.allocation_id
    assert set(started) == {m1.env["DET_TRIAL_ID"], m2.env["DET_TRIAL_ID"]}
    assert not set(started.values()) & {m1.allocation_id, m2.allocation_id}
