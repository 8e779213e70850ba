"""The reconciler against the fake provider's scripted faults, on a fake clock: zone failover in
the same tick, quota and error backoff with a visible reason, never-registered and leaked
instances reaped, a vanished instance's trial re-queued from its checkpoint at once."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.wire import agent_protocol as wire
from provisioners.base import LaunchRequest, QuotaExceeded
from provisioners.fake import FakeProvisioner
from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_trial_lifecycle import report_checkpoint

pytestmark = pytest.mark.both_databases  # work placed while the autoscaler reads: transaction isolation differs

ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


def by_id(info: dict) -> dict[str, dict]:
    return {i["id"]: i for i in info["instances"]}


async def test_no_capacity_in_the_first_zone_launches_in_the_second_in_the_same_tick(fake_pool):
    p = await fake_pool()
    p.cloud.no_capacity(zone="zone-a")
    await create_experiment(p.api, ONE)
    decision = await p.tick()
    assert [(r.zone, r.count) for r in p.cloud.launch_requests] == [("zone-a", 1), ("zone-b", 1)]
    assert [(i.zone, i.state) for i in p.cloud.launched] == [("zone-b", "running")]
    [launch] = decision.launches
    assert launch.zone == "zone-b" and "skipping t1 in zone zone-a blocked" in launch.reason
    info = await p.describe()
    assert [b["key"] for b in info["blocked"]] == ["zone:zone-a:t1"]
    assert "Insufficient capacity for t1 in zone-a" in info["blocked"][0]["reason"]
    assert "InsufficientInstanceCapacity" in info["lastErrors"][0]
    # The next tick does not try zone-a again while it is blocked, and launches nothing twice.
    await p.tick(5)
    assert len(p.cloud.launch_requests) == 2


async def test_quota_blocks_the_type_with_a_visible_reason_until_the_cooldown_ends(fake_pool):
    cloud = FakeProvisioner(quota_instances=1, zones=["zone-a", "zone-b"])
    p = await fake_pool(cloud=cloud)
    await create_experiment(p.api, CONFIG)  # two one-slot trials: two instances wanted
    await p.tick()
    assert len(cloud.failed_launches) == 1 and isinstance(cloud.failed_launches[0][1], QuotaExceeded)
    info = await p.describe()
    assert "quota" in " ".join(info["plan"]) and "Instance quota 1 exceeded" in " ".join(info["plan"])
    assert info["blocked"][0]["key"] == "type:t1"  # quota is per type: every zone is blocked
    for _ in range(11):  # 55 s of ticks inside the 5 min cooldown: no new attempt
        await p.tick(5)
    assert len(cloud.launch_requests) == 1 and p.live() == []
    await p.tick(300)
    assert len(cloud.launch_requests) == 2  # tried again once the cooldown ended


async def test_repeated_launch_errors_back_off_exponentially_and_show_the_error(fake_pool):
    p = await fake_pool()
    p.cloud.fail_next(3)  # Transient("injected transient failure")
    await create_experiment(p.api, ONE)
    start = p.clock()
    attempts: list[float] = []
    for _ in range(20):
        before = len(p.cloud.launch_requests)
        await p.tick()
        if len(p.cloud.launch_requests) > before:
            attempts.append(p.clock() - start)
        if p.live():
            break
        if _ == 4:
            info = await p.describe()
            assert info["backoff"]["failures"] == 2 and "injected transient failure" in info["backoff"]["lastError"]
            assert any("backing off after 2 launch errors" in line for line in info["plan"]), info["plan"]
        p.clock.advance(5)
    assert attempts == [0, 10, 30, 70]  # 10 s, then doubling
    assert (await p.describe())["backoff"] is None  # a success ends the streak


async def test_an_instance_that_never_registers_is_reaped_and_replaced(fake_pool):
    p = await fake_pool(max_agent_starting_period="2m")
    await create_experiment(p.api, ONE)
    await p.tick()
    [first] = p.live()
    for _ in range(3):
        await p.tick(30)
    assert p.live() == [first]  # 90 s: still within the starting period
    await p.tick(30)
    [second] = p.live()
    assert second != first  # reaped, and the pending trial got a new instance in the same tick
    rec = by_id(await p.describe())[first]
    assert rec["state"] == "terminated" and "never registered within 2m of launch" in rec["reason"]


async def test_a_dropped_agent_gets_the_starting_period_to_come_back(fake_pool):
    p = await fake_pool(max_agent_starting_period="2m", max_idle_agent_period="1h")
    await create_experiment(p.api, ONE)
    await p.tick()
    [iid] = p.live()
    p.clock.advance(600)  # launched long ago
    agent = await p.boot(iid)
    await p.tick()
    await agent.disconnect()  # a network blip, not a dead machine
    await p.tick(60)
    assert p.live() == [iid]
    await p.tick(61)
    assert p.live() == [] or p.live() != [iid]
    rec = by_id(await p.describe())[iid]
    assert "agent gone for 2m1s" in rec["reason"], rec


async def test_work_placed_while_the_autoscaler_reads_is_not_counted_twice(fake_pool, monkeypatch):
    """The root of the flaky test above: on PostgreSQL each statement has its own snapshot, so
    reading pending work and busy agents in two statements could see a trial placed in between
    as both pending and busy, and launch a second instance. Here the placement lands right after
    the autoscaler's read of the allocations, every time."""
    p = await fake_pool(max_agent_starting_period="2m", max_idle_agent_period="1h")
    await p.rt.orchestrator.stop()  # no background placement: the test places at the worst moment
    await create_experiment(p.api, ONE)
    await p.tick()
    [iid] = p.live()
    await p.boot(iid)  # its agent is idle; the trial is still pending
    placed: list[str] = []

    def placing_after(real):
        async def read(self, statement, *args, **kwargs):
            result = await real(self, statement, *args, **kwargs)
            if not placed and "allocations" in str(statement):
                placed.append(str(statement))
                await p.rt.orchestrator.tick()  # places the trial on the idle agent and commits
            return result
        return read

    monkeypatch.setattr(AsyncSession, "scalars", placing_after(AsyncSession.scalars))
    monkeypatch.setattr(AsyncSession, "execute", placing_after(AsyncSession.execute))
    decision = await p.tick()
    monkeypatch.undo()
    assert placed, "the autoscaler did not read the allocations"
    assert decision.launches == [] and p.live() == [iid]
    assert isinstance(await p.agents[iid].next_message(), wire.StartTask)


async def test_a_leaked_instance_is_reaped_with_a_reason(fake_pool):
    p = await fake_pool()
    [leak] = p.cloud.launch(LaunchRequest("lost-request", p.rt.cluster_id, "gpu", 1, "t1", "zone-a", False, ""))
    other_cluster = p.cloud.launch(LaunchRequest("x", "another-cluster", "gpu", 1, "t1", "zone-a", False, ""))
    await p.tick()
    assert p.live() == [other_cluster[0].instance_id]  # only this cluster's tags are ours to reap
    rec = by_id(await p.describe())[leak.instance_id]
    assert rec["state"] == "terminated" and "no launch record (leaked)" in rec["reason"]


async def test_a_vanished_instance_requeues_its_trial_from_the_checkpoint_at_once(fake_pool):
    p = await fake_pool()  # agents get 300 s to reconnect: the re-queue must not wait for that
    await create_experiment(p.api, ONE)
    await p.tick()
    [iid] = p.live()
    agent = await p.boot(iid)
    first = await agent.next_message()
    assert isinstance(first, wire.StartTask)
    await agent.start(first)
    ckpt = await report_checkpoint(p.api, first, steps=7)
    await p.tick(5)
    p.cloud.interrupt(iid)  # spot reclaim with no notice seen: the machine is simply gone
    await agent.disconnect()
    decision = await p.tick(5)
    rec = by_id(await p.describe())[iid]
    assert rec["state"] == "terminated" and "gone from the cloud" in rec["reason"]
    [replacement] = p.live()
    assert replacement != iid and decision.launches  # its capacity is replaced in the same tick
    agent2 = await p.boot(replacement)
    second = await agent2.next_message()
    assert isinstance(second, wire.StartTask) and second.env["DET_LATEST_CHECKPOINT"] == ckpt
    assert second.env["DET_TRIAL_RUN_ID"] == "2"
    trial = (await p.api.get(f"/api/v1/trials/{second.env['DET_TRIAL_ID']}")).json()["trial"]
    assert trial["restarts"] == 0  # the cloud's doing, not the trial's


async def test_a_failing_listing_acts_on_nothing_and_says_why(fake_pool):
    p = await fake_pool()
    await create_experiment(p.api, ONE)
    p.cloud.fail_next(1, op="list")
    decision = await p.tick()
    assert decision.actions == [] and p.cloud.launch_requests == []
    assert "listing instances failed" in (await p.describe())["lastErrors"][0]
    await p.tick(5)
    assert len(p.live()) == 1
