"""`det agent list` asks for lost agents only with `--all`, and reads every page."""

from __future__ import annotations

import json

from controlplane.cli import agent as agent_cli


def test_agent_list_leaves_lost_agents_to_the_master_unless_all(fake_master, det):
    assert det("agent", "list").rc == 0
    assert det("agent", "list", "--all", "--json").rc == 0
    plain, everything = fake_master.calls("GET", "/api/v1/agents")
    assert "all" not in plain.query
    assert everything.query["all"] == ["true"]


def test_agent_list_follows_every_page(fake_master, det, monkeypatch):
    pages = {0: ["a", "b"], 2: ["c"]}

    class Paged:
        def get(self, path, params):
            rows = pages.get(params["offset"], [])
            return {"agents": [{"id": i, "connected": True} for i in rows],
                    "pagination": {"offset": params["offset"], "total": 3}}

    monkeypatch.setattr(agent_cli, "session_for", lambda args: Paged())
    r = det("agent", "list", "--json")
    assert r.rc == 0, r.err
    assert [a["id"] for a in json.loads(r.out)] == ["a", "b", "c"]
