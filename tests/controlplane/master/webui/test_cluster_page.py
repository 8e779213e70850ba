"""The Cluster page: pools, agents and their slots, the autoscaler's instances with their reasons
and plan (what `det resource-pool describe` shows), spend per pool and per experiment, a live part
htmx polls alone, and bounded parameters."""

from __future__ import annotations

import re
from datetime import timedelta

from controlplane.common.timeutil import utcnow
from controlplane.master.agent_hub import AgentConnection
from controlplane.master.db.models import Instance
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.autoscaling.conftest import fake_pool  # noqa: F401 (the fixture)
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


async def test_an_autoscaled_instance_with_its_reason_plan_agent_and_slots(fake_pool):  # noqa: F811
    pool = await fake_pool()
    await create_experiment(pool.api, ONE)
    await pool.tick()
    (instance_id,) = pool.live()
    agent = await pool.boot(instance_id)
    await agent.start(await agent.next_message())
    await pool.tick(1)
    described = await pool.describe()
    r = await pool.api.get("/cluster")
    assert r.status_code == 200, r.text
    html = r.text
    assert '<tr data-pool="gpu">' in html and "fake, 0–2 instances" in html
    row = re.search(rf'<tr data-instance="{instance_id}".*?</tr>', html, re.S)
    assert row, html
    reason = described["instances"][0]["reason"]
    assert reason and reason.replace("'", "&#39;") in row.group(0) and "on-demand" in row.group(0)
    assert all(line.replace("'", "&#39;") in html for line in described["plan"])
    burn = re.search(r'<p class="burn">.*?</p>', html, re.S)
    assert burn and "$3.60/h" in burn.group(0) and "1 × t1 (on-demand" in burn.group(0), html
    agent_row = re.search(rf'<tr data-agent="{instance_id}".*?</tr>', html, re.S)
    assert agent_row and "enabled" in agent_row.group(0) and "1/1" in agent_row.group(0)
    assert 'class="slot busy"' in agent_row.group(0)


async def test_spend_per_pool_and_per_experiment_in_the_chosen_window(api):
    agent = FakeAgent(api.rt, agent_id="i-9", slots=1)
    await agent.register()
    exp = await create_experiment(api, ONE)
    await agent.next_message()
    async with api.rt.sessions.begin() as s:
        s.add(Instance(id="i-9", pool="default", provider="fake", state="running", price_per_hour=3.6,
                       launched_at=utcnow() - timedelta(hours=2), reason="launched for queued work"))
    r = await api.get("/cluster?spend=24h")
    assert r.status_code == 200, r.text
    pools = re.search(r'<table id="spend-pools">.*?</table>', r.text, re.S).group(0)
    assert "<th class=\"num\">default</th>" in pools and "$7.20" in pools  # 2 h × $3.60
    exps = re.search(r'<table id="spend-experiments">.*?</table>', r.text, re.S).group(0)
    assert f'href="/experiments/{exp}"' in exps


async def test_htmx_polls_get_only_the_live_part_and_parameters_are_bounded(api):
    live = await api.get("/cluster?spend=7d", headers={"HX-Request": "true", "HX-Target": "live"})
    assert live.status_code == 200 and live.text.lstrip().startswith('<div id="live"') and "<html" not in live.text
    assert "<script>" not in (await api.get("/cluster")).text
    for query, name in (("spend=1y", "spend"), ("limit=0", "limit"), ("limit=1000", "limit"), ("offset=-1", "offset")):
        r = await api.get(f"/cluster?{query}")
        assert r.status_code == 400 and name in r.json()["message"], (query, r.text)


async def test_each_instance_type_of_a_mixed_pool_with_its_prices_and_count(fake_pool):  # noqa: F811
    pool = await fake_pool(instance_type=None, slots_per_instance=None, prices={"g5.xlarge": {"spot": 0.35}},
                           instance_types=["g5.xlarge", {"type": "g5.48xlarge"}])
    await create_experiment(pool.api, ONE)
    await pool.tick()
    (instance_id,) = pool.live()
    # its agent registers saying the type it read from its instance metadata
    slots = [wire.Slot(id=0, type="cpu")]
    await pool.rt.orchestrator.agent_registered(
        AgentConnection(agent_id=instance_id, pool="gpu", slots=slots, instance_type="g5.xlarge"),
        wire.Register(agent_id=instance_id, slots=slots, pool="gpu", instance_type="g5.xlarge"))
    html = (await pool.api.get("/cluster")).text
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr data-shape="([^"]+)".*?</tr>', html, re.S)}
    assert list(rows) == ["g5.xlarge", "g5.48xlarge"], html
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", rows["g5.xlarge"], re.S)]
    assert cells == ["g5.xlarge", "1", "A10G", "$1.01", "$0.35", "1"]
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", rows["g5.48xlarge"], re.S)]
    assert cells == ["g5.48xlarge", "8", "A10G", "$16.29", "–", "0"]
    burn = re.search(r'<p class="burn">.*?</p>', html, re.S).group(0)
    assert "$1.01/h" in burn and "1 × g5.xlarge (on-demand" in burn
    agent_row = re.search(rf'<tr data-agent="{instance_id}".*?</tr>', html, re.S).group(0)
    assert "g5.xlarge" in agent_row
    listed = (await pool.api.get("/api/v1/agents")).json()["agents"]
    assert [(a["id"], a["instanceType"]) for a in listed] == [(instance_id, "g5.xlarge")]
