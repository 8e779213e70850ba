"""The reconciler against a scripted provisioner: scale up on demand, register, scale down,
fail over zones in the same tick, and terminate leaks — with a reason for each."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from controlplane.master.app import stop_runtime
from controlplane.master.db.models import Instance
from provisioners.base import TAG_CLUSTER, TAG_POOL, TAG_REQUEST, NoCapacity
from provisioners.base import Instance as CloudInstance
from tests.controlplane.master.autoscaling.conftest import login, start_master
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.support.master_app import release

PROVIDER = {"type": "fake", "instance_type": "t1", "zones": ["zone-a", "zone-b"], "max_instances": 2,
            "slots_per_instance": 1, "max_idle_agent_period": "60s", "max_agent_starting_period": "5m",
            "prices": {"t1": 3.6}}


class ScriptedCloud:
    def __init__(self) -> None:
        self.instances: dict[str, CloudInstance] = {}
        self.no_capacity_zones: set[str] = set()
        self.launches: list = []
        self.clock = 1000.0

    def launch(self, req):
        if req.zone in self.no_capacity_zones:
            raise NoCapacity("InsufficientInstanceCapacity: none left", zone=req.zone, instance_type=req.instance_type)
        self.launches.append(req)
        out = []
        for _ in range(req.count):
            inst = CloudInstance(f"i-{len(self.instances) + 1}", f"i-{len(self.instances) + 1}", "pending",
                                 req.zone or "", req.instance_type, req.spot, self.clock,
                                 {TAG_CLUSTER: req.cluster_id, TAG_POOL: req.pool, TAG_REQUEST: req.request_id})
            self.instances[inst.instance_id] = inst
            out.append(inst)
        return out

    def list_instances(self, cluster_id, pool):
        return [i for i in self.instances.values() if i.state != "terminated"
                and i.tags[TAG_CLUSTER] == cluster_id and i.tags[TAG_POOL] == pool]

    def terminate(self, ids):
        for i in ids:
            old = self.instances[i]
            self.instances[i] = CloudInstance(old.instance_id, old.name, "terminated", old.zone, old.instance_type,
                                              old.spot, old.launched_at, old.tags)


@pytest.fixture
async def scaled(master_db_url, tmp_path):
    cloud = ScriptedCloud()
    rt = await start_master(master_db_url, tmp_path, PROVIDER, cloud)
    api = await login(rt)
    try:
        yield api, rt.autoscaler.pools["gpu"], cloud
    finally:
        await api.aclose()
        await release(rt.app)
        await stop_runtime(rt)


ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


async def test_scale_up_register_run_and_scale_down(scaled):
    api, scaler, cloud = scaled
    await create_experiment(api, ONE)
    decision = await scaler.tick(1000)
    assert [(r.count, r.zone) for r in cloud.launches] == [(1, "zone-a")]
    assert any("launch" in e.lower() for e in decision.explanation)
    await scaler.tick(1001)
    assert len(cloud.launches) == 1  # the booting instance is coming capacity: no second launch
    agent = FakeAgent(api.rt, "i-1", slots=1, pool="gpu")
    await agent.register()
    start = await agent.next_message()
    await agent.start(start)
    await agent.exit(start.allocation_id, 0)
    await scaler.tick(1010)
    await scaler.tick(1100)  # idle 90 s > 60 s
    assert cloud.instances["i-1"].state == "terminated"
    async with api.rt.sessions() as session:
        row = await session.get(Instance, "i-1")
    assert row.state == "terminated" and row.registered_at is not None and "idle" in row.reason
    assert row.price_per_hour == 3.6


async def test_no_capacity_fails_over_to_the_next_zone_in_the_same_tick(scaled):
    api, scaler, cloud = scaled
    cloud.no_capacity_zones.add("zone-a")
    await create_experiment(api, ONE)
    await scaler.tick(1000)
    assert [r.zone for r in cloud.launches] == ["zone-b"]
    assert scaler.last_errors and "none left" in scaler.last_errors[0]
    assert any(b.until > 1000 for b in scaler.blocked)


async def test_a_leaked_instance_is_terminated_with_a_reason(scaled):
    api, scaler, cloud = scaled
    cloud.instances["i-leak"] = CloudInstance("i-leak", "i-leak", "running", "zone-a", "t1", False, 900.0,
                                              {TAG_CLUSTER: api.rt.cluster_id, TAG_POOL: "gpu", TAG_REQUEST: "x"})
    await scaler.tick(1000)
    assert cloud.instances["i-leak"].state == "terminated"
    async with api.rt.sessions() as session:
        rows = (await session.scalars(select(Instance))).all()
    assert [(r.id, r.state) for r in rows] == [("i-leak", "terminated")] and rows[0].reason


async def test_describe_shows_instances_cost_plan_and_reasons(scaled):
    api, scaler, cloud = scaled
    cloud.no_capacity_zones.add("zone-a")
    await create_experiment(api, ONE)
    await scaler.tick(1000)
    info = (await api.get("/api/v1/resource-pools/gpu/autoscaler")).json()
    assert info["provider"] == "fake" and info["maxInstances"] == 2
    # requested until the cloud lists it (the failed launch in zone-a left no row: nothing exists)
    assert [(i["id"], i["state"], i["zone"]) for i in info["instances"]] == [("i-1", "requested", "zone-b")]
    # what it burns now: its live instances by type and market, at the pool's price
    assert info["burn"] == [{"instanceType": "t1", "spot": False, "pricePerHour": 3.6, "count": 1}]
    # each configured type with its slots, GPU, prices (`prices:` over the catalogue) and live count
    assert info["shapes"] == [{"instanceType": "t1", "slots": 1, "gpuModel": "", "usdPerHour": 3.6,
                               "spotUsdPerHour": 0.0, "count": 1, "spotCount": 0, "configured": True}]
    assert info["burnUsdPerHour"] == 3.6
    assert info["plan"] and info["blocked"][0]["reason"].startswith("no capacity")
    assert "none left" in info["lastErrors"][0]
    assert (await api.get("/api/v1/resource-pools/nope/autoscaler")).status_code == 404
    await scaler.tick(1001)  # the cloud lists it now
    info = (await api.get("/api/v1/resource-pools/gpu/autoscaler")).json()
    assert [(i["id"], i["state"], i["zone"]) for i in info["instances"]] == [("i-1", "pending", "zone-b")]


async def test_a_job_that_cannot_fit_even_at_max_instances_is_refused(scaled):
    api, _, _ = scaled
    import yaml

    too_big = {**ONE, "resources": {"slots_per_trial": 3}}  # at most 2 instances of 1 slot
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(too_big), "modelDefinition": []})
    assert r.status_code == 400 and "cannot run in pool 'gpu'" in r.json()["message"]
    fits = {**ONE, "resources": {"slots_per_trial": 2}}
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(fits), "modelDefinition": []})
    assert r.status_code == 200


async def test_a_mixed_pool_launches_the_type_the_planner_chose_at_its_price(master_db_url, tmp_path):
    cloud = ScriptedCloud()
    provider = {**PROVIDER, "instance_type": None, "slots_per_instance": None, "max_instances": 3,
                "instance_types": [{"type": "t1", "slots": 1}, {"type": "t4", "slots": 4}],
                "prices": {"t1": 3.6, "t4": {"on_demand": 10.0, "spot": 4.0}}}
    provider = {k: v for k, v in provider.items() if v is not None}
    rt = await start_master(master_db_url, tmp_path, provider, cloud)
    api = await login(rt)
    try:
        scaler = rt.autoscaler.pools["gpu"]
        assert scaler.scaling.mixed and scaler.scaling.slots_of("t4") == 4
        await create_experiment(api, {**ONE, "resources": {"slots_per_trial": 4}})
        await scaler.tick(1000)
        assert [(r.count, r.instance_type) for r in cloud.launches] == [(1, "t4")]
        async with api.rt.sessions() as session:
            row = await session.get(Instance, "i-1")
        assert row.instance_type == "t4" and row.price_per_hour == 10.0
        info = (await api.get("/api/v1/resource-pools/gpu/autoscaler")).json()
        assert [(s["instanceType"], s["slots"], s["usdPerHour"], s["spotUsdPerHour"], s["count"])
                for s in info["shapes"]] == [("t1", 1, 3.6, 0.0, 0), ("t4", 4, 10.0, 4.0, 1)]
        assert info["burnUsdPerHour"] == 10.0
    finally:
        await api.aclose()
        await release(rt.app)
        await stop_runtime(rt)
