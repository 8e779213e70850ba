"""Listings compute each experiment's progress from its stored basis (orchestration/progress.py):
no searcher is rebuilt for a row, and the answer is the searcher's own."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from controlplane.master.db.models import Experiment
from controlplane.master.orchestration import searcher_runtime
from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_experiment_progress import report_batches, shown


async def _half_trained(api) -> int:
    """A random search of 2 trials of 10 batches, one of them 5 batches in: progress 1/4."""
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api)
    first, second = await agent.next_message(), await agent.next_message()
    await agent.start(first)
    await agent.start(second)
    await report_batches(api, first, 5)
    return exp_id


async def test_listings_compute_progress_without_loading_a_searcher(api, monkeypatch):
    exp_id = await _half_trained(api)
    listed = (await api.get("/api/v1/experiments")).json()["experiments"]
    assert [e["progress"] for e in listed] == [pytest.approx(0.25)]

    def no_parse(config, state):
        raise AssertionError("a listing rebuilt a searcher")

    monkeypatch.setattr(searcher_runtime, "load_from", no_parse)
    assert await shown(api, exp_id) == pytest.approx(0.25)  # describe, list and job queue agree
    page = await api.get("/experiments")
    assert page.status_code == 200 and 'value="0.25"' in page.text


async def test_an_experiment_without_a_basis_is_computed_from_its_searcher(api):
    """Last saved by a master before progress_basis: its searcher answers, as before."""
    exp_id = await _half_trained(api)
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Experiment).where(Experiment.id == exp_id).values(progress_basis=None))
    assert await shown(api, exp_id) == pytest.approx(0.25)
