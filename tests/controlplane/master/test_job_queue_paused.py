"""A paused experiment holds nothing and waits for nothing: the queue leaves it out (Determined's
lists what asks for resources) instead of showing it 0/0 Queued; activated, it is back in line."""

from __future__ import annotations

from tests.controlplane.master.conftest import CONFIG, create_experiment


async def queued(api) -> list[str]:
    r = await api.get("/api/v1/job-queues-v2")
    assert r.status_code == 200, r.text
    return [j["full"]["entityId"] for j in r.json()["jobs"]]


async def test_a_paused_experiment_leaves_the_queue_and_comes_back_when_activated(api):
    one = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}
    first, second = await create_experiment(api, one), await create_experiment(api, one)
    assert await queued(api) == [str(first), str(second)]
    assert (await api.post(f"/api/v1/experiments/{first}/pause")).status_code == 200
    assert await queued(api) == [str(second)]
    page = await api.get("/jobs")
    assert page.status_code == 200 and f"/experiments/{first}\"" not in page.text
    assert (await api.post(f"/api/v1/experiments/{first}/activate")).status_code == 200
    assert await queued(api) == [str(first), str(second)]
