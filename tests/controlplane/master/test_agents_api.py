"""GET /api/v1/agents and agent enable/disable: a lost agent is shown disconnected during its
reconnect window and left out after it (unless all=true); pages; typed, admin-only toggles.

The hub's clock is a fake one, so the reconnect window passes when the test says so."""

from __future__ import annotations

import pytest

from provisioners.fake import FakeClock
from tests.controlplane.master.conftest import FakeAgent
from tests.controlplane.master.test_users_api import bearer, login


@pytest.fixture
def clock(api) -> FakeClock:
    fake = FakeClock()
    api.rt.hub.clock = fake
    return fake


async def listed(api, query: str = "") -> dict[str, bool]:
    r = await api.get(f"/api/v1/agents{query}")
    assert r.status_code == 200, r.text
    return {a["id"]: a["connected"] for a in r.json()["agents"]}


async def test_a_lost_agent_is_disconnected_then_hidden_after_its_window(api, clock):
    wait = api.rt.settings.agent_reconnect_wait_s
    stays, drops = FakeAgent(api.rt, "agent-1"), FakeAgent(api.rt, "agent-2")
    await stays.register()
    await drops.register()
    assert await listed(api) == {"agent-1": True, "agent-2": True}

    await drops.disconnect()
    clock.advance(wait)  # the last moment of its window
    await api.rt.orchestrator.tick()
    assert await listed(api) == {"agent-1": True, "agent-2": False}

    clock.advance(0.5)
    await api.rt.orchestrator.tick()  # declared lost
    assert await listed(api) == {"agent-1": True}
    assert await listed(api, "?all=true") == {"agent-1": True, "agent-2": False}

    await drops.register()  # it came back after all
    assert await listed(api) == {"agent-1": True, "agent-2": True}


async def test_agents_are_listed_a_page_at_a_time(api, clock):
    for i in range(3):
        await FakeAgent(api.rt, f"agent-{i}").register()
    r = await api.get("/api/v1/agents?offset=1&limit=1")
    assert r.status_code == 200
    body = r.json()
    assert [a["id"] for a in body["agents"]] == ["agent-1"]
    assert body["pagination"] == {"offset": 1, "limit": 1, "startIndex": 1, "endIndex": 2, "total": 3}
    for bad in ("limit=-1", "offset=-1", "limit=99999999999999999999", "all=maybe"):
        r = await api.get(f"/api/v1/agents?{bad}")
        assert r.status_code == 400, (bad, r.text)
        assert bad.split("=")[0] in r.json()["message"], r.text


async def test_only_admins_enable_and_disable_agents_with_a_typed_body(api, clock):
    agent = FakeAgent(api.rt, "agent-1")
    await agent.register()
    r = await api.post("/api/v1/agents/agent-1/disable", json={"drain": True})
    assert r.status_code == 403, r.text  # `determined` is not an admin
    admin = bearer(await login(api, "admin"))
    r = await api.post("/api/v1/agents/agent-1/disable", json={"drain": "yes"}, headers=admin)
    assert r.status_code == 400 and "drain" in r.json()["message"], r.text
    r = await api.post("/api/v1/agents/agent-1/disable", json={"drain": True}, headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["agent"]["enabled"] is False and r.json()["agent"]["draining"] is True
    r = await api.post("/api/v1/agents/agent-1/enable", headers=admin)  # no body, as the CLI sends it
    assert r.status_code == 200 and r.json()["agent"]["enabled"] is True, r.text
    r = await api.post("/api/v1/agents/nobody/enable", json={}, headers=admin)
    assert r.status_code == 404


async def test_a_reregistered_agent_shows_its_new_registration_and_is_seen_now(api, monkeypatch):
    """Determined's registeredTime is the agent's current connection; a connected agent is seen now."""
    from datetime import timedelta

    from controlplane.master.orchestration import orchestrator

    agent = FakeAgent(api.rt, "agent-1")
    await agent.register()
    first = (await api.get("/api/v1/agents")).json()["agents"][0]
    await agent.disconnect()
    later = orchestrator.utcnow() + timedelta(hours=1)
    monkeypatch.setattr(orchestrator, "utcnow", lambda: later)
    await agent.register()
    again = (await api.get("/api/v1/agents")).json()["agents"][0]
    assert again["registeredTime"] > first["registeredTime"] and again["registeredTime"].startswith(
        later.strftime("%Y-%m-%dT%H:%M"))
    assert again["lastSeen"] >= first["lastSeen"]
