"""The job queue over REST: order, every `det job update` constraint, pools, shapes at submit."""

from __future__ import annotations

import httpx
import pytest

from controlplane.master.app import start_runtime, stop_runtime
from controlplane.master.pools import parse_pools
from controlplane.master.settings import MasterSettings
from tests.controlplane.master.conftest import CONFIG, JOIN_TOKEN, FakeAgent, create_experiment
from tests.support.master_app import app_with_runtime, release

pytestmark = pytest.mark.both_databases  # queue order and moves are read from and written to SQL

POOLS = [{"pool_name": "default", "scheduler": {"type": "priority"}},
         {"pool_name": "shared", "scheduler": {"type": "fair_share"}}]


@pytest.fixture
async def api2(master_db_url, tmp_path):
    pools, compute, aux = parse_pools(POOLS, None)
    settings = MasterSettings(data_dir=tmp_path / "m", db_url=master_db_url, join_token=JOIN_TOKEN, pools=pools,
                              default_resource_pool=compute, default_aux_pool=aux)
    app = app_with_runtime(settings)
    await start_runtime(app.state.runtime)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as client:
            client.rt = app.state.runtime
            login = await client.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
            token = login.json()["token"]
            client.headers["Authorization"] = f"Bearer {token}"
            yield client
    finally:
        await release(app)
        await stop_runtime(app.state.runtime)


def one_trial(pool: str = "default", **resources) -> dict:
    return {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1},
            "resources": {"resource_pool": pool, **resources}}


async def jobs(api, pool: str = "default") -> list[dict]:
    r = await api.get(f"/api/v1/job-queues-v2?resourcePool={pool}")
    assert r.status_code == 200, r.text
    return [j["full"] for j in r.json()["jobs"]]


async def update(api, **change) -> httpx.Response:
    return await api.post("/api/v1/job-queues", json={"updates": [change]})


async def test_queue_order_and_moves(api2):
    a = await create_experiment(api2, one_trial())
    b = await create_experiment(api2, one_trial(priority=10))
    c = await create_experiment(api2, one_trial())
    order = await jobs(api2)
    assert [j["entityId"] for j in order] == [str(b), str(a), str(c)]
    assert order[0]["summary"] == {"state": "STATE_QUEUED", "jobsAhead": 0} and order[0]["priority"] == 10
    job = {j["entityId"]: j["jobId"] for j in order}
    assert (await update(api2, jobId=job[str(c)], aheadOf=job[str(b)])).status_code == 200
    assert [j["entityId"] for j in await jobs(api2)] == [str(c), str(b), str(a)]
    assert (await update(api2, jobId=job[str(c)], behindOf=job[str(a)])).status_code == 200
    assert [j["entityId"] for j in await jobs(api2)] == [str(b), str(a), str(c)]
    assert (await update(api2, jobId=job[str(a)], priority=5)).status_code == 200
    assert [j["entityId"] for j in await jobs(api2)][0] == str(a)


@pytest.mark.parametrize("pool, change, message", [
    ("default", {"weight": 2}, "weight applies only under the fair_share scheduler"),
    ("shared", {"priority": 3}, "priority applies only under the priority scheduler"),
    ("shared", {"aheadOf": "SELF"}, "queue moves apply only under the priority scheduler"),
    ("default", {"priority": 100}, "priority must be an integer from 1 to 99"),
    ("default", {"resourcePool": "nowhere"}, "unknown pool 'nowhere'"),
    ("default", {"priority": 3, "weight": 2}, "give exactly one of"),
    ("default", {"aheadOf": "SELF"}, "cannot move relative to itself"),
])
async def test_every_update_constraint_has_its_error(api2, pool, change, message):
    exp_id = await create_experiment(api2, one_trial(pool))
    job_id = (await jobs(api2, pool))[0]["jobId"]
    change = {k: (job_id if v == "SELF" else v) for k, v in change.items()}
    r = await update(api2, jobId=job_id, **change)
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    assert (await api2.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]["resourcePool"] == pool


async def test_unknown_job_is_404_and_weight_works_under_fair_share(api2):
    assert (await update(api2, jobId="nope-nope", priority=3)).status_code == 404
    await create_experiment(api2, one_trial("shared"))
    job_id = (await jobs(api2, "shared"))[0]["jobId"]
    assert (await update(api2, jobId=job_id, weight=3)).status_code == 200
    assert (await jobs(api2, "shared"))[0]["weight"] == 3.0


async def test_move_between_pools_and_set_priority(api2):
    exp_id = await create_experiment(api2, one_trial())
    job_id = (await jobs(api2))[0]["jobId"]
    assert (await update(api2, jobId=job_id, resourcePool="shared")).status_code == 200
    assert (await jobs(api2)) == [] and len(await jobs(api2, "shared")) == 1
    r = await api2.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"priority": 7}})
    assert r.status_code == 400 and "fair_share" in r.json()["message"]
    r = await api2.patch(f"/api/v1/experiments/{exp_id}", json={"resources": {"weight": 2, "maxSlots": 4}})
    assert r.status_code == 200


async def test_impossible_shape_is_refused_at_submit(api2):
    await FakeAgent(api2.rt, "a1", slots=2).register()
    await FakeAgent(api2.rt, "a2", slots=2).register()
    import yaml

    r = await api2.post("/api/v1/experiments", json={"config": yaml.safe_dump(one_trial(slots_per_trial=3)),
                                                      "modelDefinition": []})
    assert r.status_code == 400
    assert "resources.slots_per_trial: a trial needing 3 slots cannot run" in r.json()["message"]
    assert "up to 2 slots" in r.json()["message"] and "(2, 4)" in r.json()["message"]
    assert (await api2.get("/api/v1/experiments")).json()["experiments"] == []
    assert (await api2.post("/api/v1/experiments", json={"config": yaml.safe_dump(one_trial(slots_per_trial=4)),
                                                          "modelDefinition": []})).status_code == 200


async def test_resource_pools_listing(api2):
    pools = (await api2.get("/api/v1/resource-pools")).json()["resourcePools"]
    assert [(p["name"], p["schedulerType"], p["defaultComputePool"]) for p in pools] == [
        ("default", "SCHEDULER_TYPE_PRIORITY", True), ("shared", "SCHEDULER_TYPE_FAIR_SHARE", False)]
