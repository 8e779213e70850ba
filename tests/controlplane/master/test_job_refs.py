"""Short job ids over REST: any unique prefix of 8+ characters names a job in every field of
`POST /api/v1/job-queues`; a shorter or ambiguous one is a 400 naming the field; answers keep full ids."""

from __future__ import annotations

import pytest
from sqlalchemy import update as sql_update

from controlplane.master.db.models import Experiment
from tests.controlplane.master.conftest import create_experiment
from tests.controlplane.master.test_job_queue_api import jobs, one_trial, update

pytestmark = pytest.mark.both_databases  # short ids are prefix matches (LIKE) in SQL


async def job_ids(api) -> dict[int, str]:
    return {int(j["entityId"]): j["jobId"] for j in await jobs(api)}


async def set_job_id(api, exp_id: int, job_id: str) -> None:
    async with api.rt.sessions.begin() as session:
        await session.execute(sql_update(Experiment).where(Experiment.id == exp_id).values(job_id=job_id))


async def test_a_unique_8_character_prefix_names_a_job_everywhere(api):
    a = await create_experiment(api, one_trial())
    b = await create_experiment(api, one_trial())
    c = await create_experiment(api, one_trial())
    ids = await job_ids(api)
    assert all(len(j) == 36 for j in ids.values())  # answers carry full ids
    assert (await update(api, jobId=ids[c][:8], aheadOf=ids[a][:8])).status_code == 200
    assert [int(j["entityId"]) for j in await jobs(api)] == [c, a, b]
    assert (await update(api, jobId=ids[c][:12], behindOf=ids[b][:8])).status_code == 200
    assert [int(j["entityId"]) for j in await jobs(api)] == [a, b, c]
    assert (await update(api, jobId=ids[b][:8], priority=7)).status_code == 200
    assert (await jobs(api))[0]["jobId"] == ids[b]
    r = await api.post("/api/v1/job-queues", json={"updates": [{"jobId": ids[a][:9], "priority": 3},
                                                                 {"jobId": ids[c][:8], "aheadOf": ids[a][:10]}]})
    assert r.status_code == 200, r.text
    assert [int(j["entityId"]) for j in await jobs(api)] == [c, a, b]


async def test_a_prefix_under_8_characters_is_a_400_naming_the_field(api):
    a = await create_experiment(api, one_trial())
    b = await create_experiment(api, one_trial())
    ids = await job_ids(api)
    r = await update(api, jobId="abcdef1", priority=3)
    assert r.status_code == 400
    assert r.json()["message"] == ("updates[0].jobId: 'abcdef1' is too short to name a job: give its full id "
                                   "or at least 8 of its first characters")
    r = await update(api, jobId=ids[a][:7], priority=3)  # whatever its characters, digits included
    assert r.status_code == 400 and "is too short to name a job" in r.json()["message"]
    r = await update(api, jobId="4242", priority=3)  # digits name an experiment id first
    assert r.status_code == 400
    assert r.json()["message"].startswith("updates[0].jobId: no experiment has id 4242, and '4242' is too short")
    r = await update(api, jobId=ids[a], behindOf=ids[b][:4])
    assert r.status_code == 400 and r.json()["message"].startswith("updates[0].behindOf: ")
    r = await update(api, jobId=ids[a], aheadOf="x")
    assert r.status_code == 400 and r.json()["message"].startswith("updates[0].aheadOf: 'x' is too short")


async def test_an_ambiguous_prefix_is_a_400_naming_some_candidates(api):
    exps = [await create_experiment(api, one_trial()) for _ in range(7)]
    for i, exp_id in enumerate(exps):
        await set_job_id(api, exp_id, f"73853c5c-{i:04d}-4000-8000-000000000000")
    r = await update(api, jobId="73853c5c", priority=3)
    assert r.status_code == 400
    message = r.json()["message"]
    assert message.startswith("updates[0].jobId: job id prefix '73853c5c' is ambiguous: it matches "
                              "73853c5c-0000-4000-8000-000000000000, 73853c5c-0001-")
    assert message.count("73853c5c-") == 5 and "and more" in message  # bounded
    r = await update(api, jobId="73853c5c-0006", priority=3)  # longer: unique again
    assert r.status_code == 200, r.text
    r = await update(api, jobId="73853c5c-0006", aheadOf="73853c5c-000")
    assert r.status_code == 400 and r.json()["message"].startswith("updates[0].aheadOf: job id prefix")
    assert {j["priority"] for j in await jobs(api)} == {3, 42}


async def test_unknown_prefix_is_404_and_experiment_ids_still_name_jobs(api):
    a = await create_experiment(api, one_trial())
    r = await update(api, jobId="ffffffff", priority=3)
    assert r.status_code == 404 and r.json()["message"] == "updates[0].jobId: job ffffffff not found"
    assert (await update(api, jobId=str(a), priority=4)).status_code == 200
    assert (await jobs(api))[0]["priority"] == 4
    assert (await update(api, jobId="%%%%%%%%", priority=3)).status_code == 404  # wildcards match themselves
