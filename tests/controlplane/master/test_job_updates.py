"""`POST /api/v1/job-queues` batches and moves as a user sees them: a batch is applied whole or not
at all, each update judged where the batch leaves its job; `--ahead-of` a running job of equal
priority makes it give way when the pool is full (the scheduler decides, the queue says who is first)."""

from __future__ import annotations

import pytest

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_allocations_rendezvous import task_headers
from tests.controlplane.master.test_job_queue_api import api2, jobs, one_trial  # noqa: F401 (a fixture)

pytestmark = pytest.mark.both_databases  # a batch is one transaction: applied whole or not at all


async def batch(api, *updates: dict):
    return await api.post("/api/v1/job-queues", json={"updates": list(updates)})


def queue(rows: list[dict], key: str = "priority") -> list[tuple[int, int | float]]:
    return [(int(j["entityId"]), j[key]) for j in rows]


async def test_a_batch_with_one_bad_update_changes_nothing(api2):  # noqa: F811
    a, b, c = [await create_experiment(api2, one_trial()) for _ in range(3)]
    ids = {int(j["entityId"]): j["jobId"] for j in await jobs(api2)}
    before = queue(await jobs(api2))
    r = await batch(api2, {"jobId": ids[a], "priority": 5}, {"jobId": ids[c][:8], "aheadOf": ids[a][:8]},
                    {"jobId": ids[b], "resourcePool": "shared"}, {"jobId": ids[c], "weight": 2})
    assert r.status_code == 400
    assert r.json()["message"].startswith("updates[3].weight: weight applies only under the fair_share scheduler")
    assert queue(await jobs(api2)) == before == [(a, 42), (b, 42), (c, 42)]
    assert await jobs(api2, "shared") == []


async def test_each_update_is_judged_where_the_batch_leaves_its_job(api2):  # noqa: F811
    a, b = [await create_experiment(api2, one_trial()) for _ in range(2)]
    ids = {int(j["entityId"]): j["jobId"] for j in await jobs(api2)}
    # A weight after a move to the fair-share pool is valid; before it, not (and nothing moves).
    r = await batch(api2, {"jobId": ids[b], "weight": 3}, {"jobId": ids[b], "resourcePool": "shared"})
    assert r.status_code == 400 and r.json()["message"].startswith("updates[0].weight: ")
    assert [int(j["entityId"]) for j in await jobs(api2)] == [a, b]
    r = await batch(api2, {"jobId": ids[b], "resourcePool": "shared"}, {"jobId": ids[b], "weight": 3})
    assert r.status_code == 200, r.text
    assert queue(await jobs(api2, "shared"), "weight") == [(b, 3.0)]
    # A job moved away in the batch can no longer be an anchor in the pool it left.
    c = await create_experiment(api2, one_trial())
    ids[c] = (await jobs(api2))[-1]["jobId"]
    r = await batch(api2, {"jobId": ids[a], "resourcePool": "shared"}, {"jobId": ids[c], "aheadOf": ids[a]})
    assert r.status_code == 400
    assert r.json()["message"] == f"updates[1].aheadOf: job {ids[a]} is in pool 'shared', not 'default'"
    assert [int(j["entityId"]) for j in await jobs(api2)] == [a, c]


async def preempt_signal(api, start: wire.StartTask) -> bool:
    url = f"/api/v1/allocations/{start.allocation_id}/signals/preemption?timeout_seconds=0"
    r = await api.get(url, headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text
    return r.json()["preempt"]


async def test_ahead_of_a_running_job_of_equal_priority_preempts_it(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    y = await create_experiment(api, one_trial())
    y_start = await agent.next_message()
    await agent.start(y_start)
    x = await create_experiment(api, one_trial())
    ids = {int(j["entityId"]): j["jobId"] for j in await jobs(api)}
    # Behind it, or ahead of it in another priority band, nothing is preempted.
    r = await api.post("/api/v1/job-queues", json={"updates": [{"jobId": ids[x][:8], "behindOf": ids[y][:8]}]})
    assert r.status_code == 200, r.text
    await api.rt.orchestrator.tick()
    assert not await preempt_signal(api, y_start)
    # The seed's `det job update X --ahead-of Y`: Y is running and the pool is full, so Y gives way.
    r = await api.post("/api/v1/job-queues", json={"updates": [{"jobId": ids[x][:8], "aheadOf": ids[y][:8]}]})
    assert r.status_code == 200, r.text
    await api.rt.orchestrator.tick()
    assert await preempt_signal(api, y_start)
    assert [(int(j["entityId"]), j["summary"]["state"]) for j in await jobs(api)] == [
        (x, "STATE_QUEUED"), (y, "STATE_SCHEDULED")]  # until Y checkpoints and exits
    ack = await api.post(f"/api/v1/allocations/{y_start.allocation_id}/signals/ack_preemption",
                         headers=task_headers(y_start.session_token))
    assert ack.status_code == 200
    await agent.exit(y_start.allocation_id, 0)
    x_start = await agent.next_message()
    assert isinstance(x_start, wire.StartTask) and x_start.env["DET_EXPERIMENT_ID"] == str(x)
    await agent.start(x_start)
    assert [(int(j["entityId"]), j["summary"]["state"]) for j in await jobs(api)] == [
        (x, "STATE_SCHEDULED"), (y, "STATE_QUEUED")]
    # Y, now behind X, waits: it never preempts X back.
    await api.rt.orchestrator.tick()
    assert not await preempt_signal(api, x_start)
