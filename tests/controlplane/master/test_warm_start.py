"""Warm start as Determined's master does it (``master/internal/trial.go``): each trial of an
experiment whose searcher names ``source_checkpoint_uuid`` (or ``source_trial_id``: that trial's
latest completed checkpoint) gets it as DET_LATEST_CHECKPOINT (steps completed 0) until it has a
checkpoint of its own; the trial answers name it as ``warmStartCheckpointUuid``."""

from __future__ import annotations

import pytest

from controlplane.master.db.models import Checkpoint
from controlplane.state import checkpoint as CK
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_trial_lifecycle import report_checkpoint, task_headers

pytestmark = pytest.mark.both_databases  # the source_trial_id query orders checkpoints per dialect

ONE_TRIAL = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "max_restarts": 2}


def warm(source: dict) -> dict:
    return {**ONE_TRIAL, "searcher": {**ONE_TRIAL["searcher"], **source}}


async def source_checkpoints(api, agent: FakeAgent, *steps: int) -> tuple[int, list[str]]:
    """A completed one-trial experiment that reported a checkpoint at each of ``steps``: its trial id and
    the checkpoints' uuids."""
    await create_experiment(api, ONE_TRIAL)
    start = await agent.next_message()
    await agent.start(start)
    uuids = [await report_checkpoint(api, start, s) for s in steps]
    await agent.exit(start.allocation_id, 0)
    return int(start.env["DET_TRIAL_ID"]), uuids


async def start_of(agent: FakeAgent) -> wire.StartTask:
    msg = await agent.next_message()
    assert isinstance(msg, wire.StartTask), msg
    await agent.start(msg)
    return msg


async def test_the_first_run_starts_from_the_source_checkpoint_and_resumes_from_its_own(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    _, (source,) = await source_checkpoints(api, agent, 100)
    exp_id = await create_experiment(api, warm({"source_checkpoint_uuid": source}))
    first = await start_of(agent)
    assert first.env["DET_LATEST_CHECKPOINT"] == source and first.env["DET_STEPS_COMPLETED"] == "0"
    assert first.readable_checkpoints == [source]  # of a shared_fs, mounted read-only
    trial_id = first.env["DET_TRIAL_ID"]
    trial = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]
    assert trial["warmStartCheckpointUuid"] == source and trial["latestCheckpointUuid"] is None
    listed = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    assert [t["warmStartCheckpointUuid"] for t in listed] == [source]
    # The run's token reads the other experiment's checkpoint it restores from.
    r = await api.get(f"/api/v1/checkpoints/{source}", headers=task_headers(first.session_token))
    assert r.status_code == 200, r.text

    await agent.exit(first.allocation_id, 1)  # failed before a checkpoint of its own: again from the source
    second = await start_of(agent)
    assert second.env["DET_LATEST_CHECKPOINT"] == source and second.env["DET_STEPS_COMPLETED"] == "0"
    own = await report_checkpoint(api, second, 3)
    await agent.exit(second.allocation_id, 1)
    third = await start_of(agent)  # now its own checkpoint, with its steps
    assert third.env["DET_LATEST_CHECKPOINT"] == own and third.env["DET_STEPS_COMPLETED"] == "3"
    assert third.readable_checkpoints == [own, source]
    trial = (await api.get(f"/api/v1/trials/{trial_id}")).json()["trial"]
    assert trial["warmStartCheckpointUuid"] == source and trial["latestCheckpointUuid"] == own


async def test_source_trial_id_warm_starts_from_that_trials_latest_checkpoint(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    source_trial, (at_10, at_5) = await source_checkpoints(api, agent, 10, 5)  # latest: most steps
    exp_id = await create_experiment(api, warm({"source_trial_id": source_trial}))
    first = await start_of(agent)
    assert first.env["DET_LATEST_CHECKPOINT"] == at_10 and first.readable_checkpoints == [at_10]
    listed = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    assert [t["warmStartCheckpointUuid"] for t in listed] == [at_10]
    await agent.exit(first.allocation_id, 0)

    # Another experiment's run may not read it: its token is refused.
    await create_experiment(api, ONE_TRIAL)
    other = await start_of(agent)
    assert "DET_LATEST_CHECKPOINT" not in other.env and other.readable_checkpoints == []
    r = await api.get(f"/api/v1/checkpoints/{at_10}", headers=task_headers(other.session_token))
    assert r.status_code == 403, r.text
    trial = (await api.get(f"/api/v1/trials/{other.env['DET_TRIAL_ID']}")).json()["trial"]
    assert trial["warmStartCheckpointUuid"] is None


async def test_a_warm_start_from_no_usable_checkpoint_is_refused(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    source_trial, (source,) = await source_checkpoints(api, agent, 4)

    async def refused(source_fields: dict, why: str) -> None:
        import yaml

        body = {"config": yaml.safe_dump(warm(source_fields)), "modelDefinition": []}
        r = await api.post("/api/v1/experiments", json=body)
        assert r.status_code == 400 and why in r.text, r.text

    await refused({"source_checkpoint_uuid": "4c0ffee0-0000-4000-8000-000000000000"}, "no checkpoint found with UUID")
    async with api.rt.sessions.begin() as session:
        (await session.get(Checkpoint, source)).state = CK.DELETED
    await refused({"source_checkpoint_uuid": source}, "it is DELETED")
    await refused({"source_trial_id": source_trial}, f"no checkpoint found for source trial {source_trial}")
    await refused({"source_trial_id": 9999}, "no checkpoint found for source trial 9999")
