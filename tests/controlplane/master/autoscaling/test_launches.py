"""Launches survive a master restart: the row of a launch is stored before the cloud is called,
so a new master over the same database waits for an instance the cloud lists only after the
restart (kept, its agent used) instead of terminating it as a leak; one never listed is given
up after `max_agent_starting_period`, as before, and terminated if it turns up later."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import select

from controlplane.master.app import stop_runtime
from controlplane.master.db.models import Instance, StateTransition
from controlplane.wire import agent_protocol as wire
from provisioners.fake import FakeClock, FakeProvisioner
from tests.controlplane.master.autoscaling.conftest import BASE_PROVIDER, login, start_master
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.support.master_app import release

ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


@asynccontextmanager
async def master(db_url, tmp_path, cloud):
    """One master's life over the database: its API client and its pool's reconciler."""
    rt = await start_master(db_url, tmp_path, BASE_PROVIDER, cloud)  # grace: 5m to be listed and register
    api = await login(rt)
    try:
        yield api, rt.autoscaler.pools["gpu"]
    finally:
        await api.aclose()
        await release(rt.app)
        await stop_runtime(rt)


def later(clock: FakeClock, seconds: float) -> float:
    clock.advance(seconds)
    return clock()


async def rows(api) -> dict[str, tuple[str, str]]:
    async with api.rt.sessions() as s:
        return {r.id: (r.state, r.reason) for r in (await s.scalars(select(Instance))).all()}


@pytest.mark.both_databases  # the in-flight launch is read back from the row's time after the restart
async def test_a_launch_listed_only_after_a_restart_is_kept_and_its_agent_used(master_db_url, tmp_path):
    clock = FakeClock()
    cloud = FakeProvisioner(zones=["zone-a", "zone-b"], clock=clock, list_delay_s=60)  # listed 60 s after launch
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):
        await create_experiment(api, ONE)
        await scaler.tick(clock())
        [iid] = [i.instance_id for i in cloud.launched]
    clock.advance(10)
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):  # the restarted master
        decision = await scaler.tick(clock())
        assert decision.launches == [] and cloud.terminated == [], decision.explanation  # waited for
        assert (await rows(api))[iid][0] == "requested"
        clock.advance(60)
        decision = await scaler.tick(clock())  # the cloud lists it now
        assert cloud.terminated == [] and decision.launches == [], decision.explanation
        assert (await rows(api))[iid][0] == "running"
        agent = FakeAgent(api.rt, iid, slots=1, pool="gpu")
        await agent.register()
        start = await agent.next_message()
        assert isinstance(start, wire.StartTask)  # the pending trial runs on the instance it was launched for
        await scaler.tick(later(clock, 5))
        assert cloud.terminated == [] and [i.instance_id for i in cloud.launched] == [iid]


async def test_a_master_killed_during_the_launch_call_adopts_the_instance(master_db_url, tmp_path):
    """The row is written before the call: a launch whose answer the master never recorded is
    still its own when the cloud lists it, found by its launch request's tag."""
    clock = FakeClock()
    cloud = FakeProvisioner(zones=["zone-a", "zone-b"], clock=clock)
    real_launch = cloud.launch

    def launch_then_die(req):
        real_launch(req)
        raise asyncio.CancelledError  # the master is killed before the answer is stored

    cloud.launch = launch_then_die
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):
        await create_experiment(api, ONE)
        with pytest.raises(asyncio.CancelledError):
            await scaler.tick(clock())
        [(placeholder, (state, _))] = (await rows(api)).items()
        assert state == "requested"
    cloud.launch = real_launch
    [iid] = [i.instance_id for i in cloud.launched]
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):
        decision = await scaler.tick(later(clock, 5))
        assert cloud.terminated == [] and decision.launches == [], decision.explanation
        assert list(await rows(api)) == [iid]  # the placeholder took the cloud's id
        async with api.rt.sessions() as s:
            history = (await s.scalars(select(StateTransition.to_state).where(
                StateTransition.entity_id == iid).order_by(StateTransition.id))).all()
        assert history == ["requested", "running"]


async def test_a_launch_never_listed_is_given_up_after_the_grace_and_reaped_if_it_turns_up(master_db_url,
                                                                                         tmp_path):
    clock = FakeClock()
    cloud = FakeProvisioner(zones=["zone-a", "zone-b"], clock=clock, list_delay_s=400)  # past the 5m grace
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):
        await create_experiment(api, ONE)
        await scaler.tick(clock())
        [iid] = [i.instance_id for i in cloud.launched]
    async with master(master_db_url, tmp_path, cloud) as (api, scaler):
        assert (await scaler.tick(later(clock, 299))).launches == []  # still waited for
        decision = await scaler.tick(later(clock, 2))
        state, reason = (await rows(api))[iid]
        assert state == "terminated" and "never listed by the cloud within 5m" in reason
        [replacement] = [i.instance_id for i in cloud.launched if i.instance_id != iid]
        assert decision.launches  # its demand gets a new launch in the same tick
        await scaler.tick(later(clock, 100))  # it turns up after all: unknown now, a leak
        assert cloud.terminated == [iid] and replacement not in cloud.terminated
