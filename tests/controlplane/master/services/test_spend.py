"""Spend: an experiment pays the share of an instance's slots its allocations held, for as long as
they held them; a pool pays its instances whole, idle or not; time series put both in buckets."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from controlplane.common.timeutil import utcnow
from controlplane.master.db.models import Allocation, Instance
from controlplane.master.services import spend
from tests.controlplane.master.conftest import FakeAgent, create_experiment

pytestmark = pytest.mark.both_databases  # spend is summed and bucketed in SQL (time arithmetic differs)


async def _two_allocations_on_an_instance(api):
    """Experiment ``exp`` holds 1 of the 2 slots of instance i-1 twice: 0..1000 s and 500 s..now,
    with t0 = now - 2000 s; i-1 costs $3.60/h (0.001 $/s) and was launched at t0 - 100 s."""
    agent = FakeAgent(api.rt, agent_id="i-1", slots=2)
    await agent.register()
    exp = await create_experiment(api)
    await agent.next_message()
    await agent.next_message()
    now = utcnow().replace(microsecond=0)
    t0 = now - timedelta(seconds=2000)
    async with api.rt.sessions.begin() as s:
        allocs = (await s.scalars(select(Allocation).order_by(Allocation.id))).all()
        assert len(allocs) == 2 and all(len(a.slot_ids) == 1 for a in allocs)
        allocs[0].assigned_at, allocs[0].ended_at = t0, t0 + timedelta(seconds=1000)
        allocs[1].assigned_at, allocs[1].ended_at = t0 + timedelta(seconds=500), None
        s.add(Instance(id="i-1", pool="default", provider="fake", state="running", price_per_hour=3.6,
                       launched_at=t0 - timedelta(seconds=100)))
        # long gone before any window below: costs the pool nothing in them
        s.add(Instance(id="i-old", pool="default", provider="fake", state="terminated", price_per_hour=100.0,
                       launched_at=t0 - timedelta(days=30), terminated_at=t0 - timedelta(days=29)))
    return exp, now, t0


async def test_experiment_pays_its_share_of_the_slots_for_the_time_it_held_them(api):
    exp, now, _ = await _two_allocations_on_an_instance(api)
    async with api.rt.sessions() as s:
        got = await spend.experiment_spend(s, [exp, exp, 999], now)
    # 1000 s × 0.001 × 1/2 + 1500 s × 0.001 × 1/2
    assert got == {exp: pytest.approx(1.25), 999: 0.0}


async def test_an_allocation_on_an_agent_the_autoscaler_did_not_launch_costs_nothing(api):
    agent = FakeAgent(api.rt, agent_id="static-1", slots=2)
    await agent.register()
    exp = await create_experiment(api)
    await agent.next_message()
    async with api.rt.sessions() as s:
        assert await spend.experiment_spend(s, [exp], utcnow()) == {exp: 0.0}
        assert await spend.experiment_spend(s, [], utcnow()) == {}


async def test_series_per_pool_and_per_experiment_in_buckets(api):
    exp, now, t0 = await _two_allocations_on_an_instance(api)
    async with api.rt.sessions() as s:
        series = await spend.spend_over_time(s, now, window=timedelta(hours=1), bucket=timedelta(minutes=10))
    assert len(series.times) == 6 and series.times[0] == pytest.approx(now.timestamp() - 3600)
    assert list(series.pools) == ["default"]
    assert sum(series.pools["default"]) == pytest.approx(2.1)  # i-1 whole, 2100 s; i-old not at all
    assert list(series.experiments) == [exp]
    assert sum(series.experiments[exp]) == pytest.approx(1.25)
    assert series.other == [0.0] * 6 and not series.truncated
    # the last bucket (now-600 s .. now): only the second allocation, 600 s of half an instance
    assert series.experiments[exp][-1] == pytest.approx(0.3)
    assert series.pools["default"][0] == 0.0  # before t0 - 100 s: no instance yet


async def test_bounds_are_refused_with_the_parameter_named(api):
    async with api.rt.sessions() as s:
        with pytest.raises(ValueError, match="exp_ids"):
            await spend.experiment_spend(s, list(range(spend.MAX_EXPERIMENTS + 1)), utcnow())
        with pytest.raises(ValueError, match="window"):
            await spend.spend_over_time(s, utcnow(), window=timedelta(days=365), bucket=timedelta(minutes=1))
        with pytest.raises(ValueError, match="bucket"):
            await spend.spend_over_time(s, utcnow(), bucket=timedelta(seconds=1))
