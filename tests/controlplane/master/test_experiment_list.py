"""``GET /api/v1/experiments`` with Determined's GetExperimentsRequest filters and orders
(``services/experiment_list.py``), and the summary fields of experiment and trial answers."""

from __future__ import annotations

from typing import cast

import pytest
import yaml
from sqlalchemy import update

from controlplane.master.db.models import Experiment, Trial
from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_ownership import add_user

pytestmark = pytest.mark.both_databases  # filters, JSON labels and sort orders are SQL

ONE = {**CONFIG, "searcher": {**cast(dict, CONFIG["searcher"]), "max_trials": 1, "max_concurrent_trials": 1}}


async def ids(api, **params) -> list[int]:
    r = await api.get("/api/v1/experiments", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pagination"]["total"] >= len(body["experiments"])
    return [e["id"] for e in body["experiments"]]


async def three(api) -> tuple[int, int, int]:
    a = await create_experiment(api, {**ONE, "name": "mnist-small", "description": "Fast run"})
    b = await create_experiment(api, {**ONE, "name": "MNIST_big", "description": "slow"})
    c = await create_experiment(api, {**ONE, "name": "cifar 100%", "description": "fast too"})
    return a, b, c


async def test_name_and_description_match_a_substring_whatever_its_case(api):
    a, b, c = await three(api)
    assert await ids(api, name="mnist") == [a, b]
    assert await ids(api, name="NIST_") == [b]  # _ and % are plain characters
    assert await ids(api, name="100%") == [c]
    assert await ids(api, name="nothing") == []
    assert await ids(api, description="FAST") == [a, c]
    assert await ids(api, name="mnist", description="fast") == [a]


async def test_labels_all_must_be_present(api):
    a, b, c = await three(api)
    for exp_id, labels in ((a, ["x", "y"]), (b, ["x"]), (c, ["y"])):
        r = await api.patch(f"/api/v1/experiments/{exp_id}", json={"labels": labels})
        assert r.status_code == 200, r.text
    assert await ids(api, labels="x") == [a, b]
    assert await ids(api, labels=["x", "y"]) == [a]
    assert await ids(api, labels="z") == []


async def test_states_users_user_ids_and_the_id_filter(api):
    a, b, c = await three(api)
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Experiment).where(Experiment.id == b).values(state="PAUSED"))
        await session.execute(update(Experiment).where(Experiment.id == c).values(state="COMPLETED"))
    assert await ids(api, states="STATE_PAUSED") == [b]
    assert await ids(api, states=["STATE_ACTIVE", "STATE_COMPLETED"]) == [a, c]
    assert await ids(api, states="STATE_RUNNING") == []  # a substate of ACTIVE: no stored state
    nora = await add_user(api, "nora")
    r = await api.post("/api/v1/experiments", headers=nora, json={"config": yaml.safe_dump(ONE),
                                                                    "modelDefinition": []})
    assert r.status_code == 200, r.text
    d = r.json()["experiment"]["id"]
    nora_id = r.json()["experiment"]["userId"]
    assert await ids(api, users="nora") == [d]
    assert await ids(api, userIds=nora_id) == [d]
    assert await ids(api, users=["nora", "determined"]) == [a, b, c, d]
    assert await ids(api, **{"experimentIdFilter.gt": a}) == [b, c, d]
    assert await ids(api, **{"experimentIdFilter.gte": b, "experimentIdFilter.lt": d}) == [b, c]
    assert await ids(api, **{"experimentIdFilter.lte": a}) == [a]
    assert await ids(api, **{"experimentIdFilter.incl": [a, c]}) == [a, c]
    assert await ids(api, **{"experimentIdFilter.notIn": [a, c]}) == [b, d]


async def test_sort_and_order(api):
    a, b, c = await three(api)
    assert await ids(api, name="mnist", sortBy="SORT_BY_NAME") == [b, a]  # "MNIST_big", "mnist-small" in any collation
    assert await ids(api, sortBy="SORT_BY_DESCRIPTION") == [a, c, b]  # "Fast run", "fast too", "slow"
    assert await ids(api, sortBy="SORT_BY_ID", orderBy="ORDER_BY_DESC") == [c, b, a]
    assert await ids(api, orderBy="ORDER_BY_DESC") == [c, b, a]
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Trial).where(Trial.experiment_id == a).values(searcher_metric_value=0.5))
        await session.execute(update(Trial).where(Trial.experiment_id == c).values(searcher_metric_value=0.1))
    # b has no metric: last in either direction, as Determined's NULLS LAST
    assert await ids(api, sortBy="SORT_BY_SEARCHER_METRIC_VAL") == [c, a, b]
    assert await ids(api, sortBy="SORT_BY_SEARCHER_METRIC_VAL", orderBy="ORDER_BY_DESC") == [a, c, b]
    assert await ids(api, sortBy="SORT_BY_NUM_TRIALS", limit=2) == [a, b]
    assert await ids(api, sortBy="SORT_BY_CHECKPOINT_COUNT", offset=1) == [b, c]
    for sort in ("SORT_BY_DESCRIPTION", "SORT_BY_START_TIME", "SORT_BY_END_TIME", "SORT_BY_STATE", "SORT_BY_PROGRESS",
                 "SORT_BY_USER", "SORT_BY_FORKED_FROM", "SORT_BY_RESOURCE_POOL", "SORT_BY_PROJECT_ID",
                 "SORT_BY_CHECKPOINT_SIZE", "SORT_BY_UNSPECIFIED"):
        assert sorted(await ids(api, sortBy=sort, orderBy="ORDER_BY_DESC")) == [a, b, c], sort


@pytest.mark.parametrize("params,named", [
    ({"sortBy": "SORT_BY_COLOR"}, "sortBy"),
    ({"orderBy": "ORDER_BY_RANDOM"}, "orderBy"),
    ({"states": "STATE_SLEEPING"}, "states"),
    ({"experimentIdFilter.gt": "x"}, "experimentIdFilter.gt"),
    ({"experimentIdFilter.incl": [str(i) for i in range(1001)]}, "experimentIdFilter.incl"),
    ({"name": "a\x00b"}, "name"),
    ({"labels": "x" * 256}, "labels"),
    ({"userIds": str(2**40)}, "userIds"),
])
async def test_a_bad_value_is_a_400_naming_it(api, params, named):
    r = await api.get("/api/v1/experiments", params=params)
    assert r.status_code == 400 and named in r.text, r.text


async def test_answers_carry_the_summary_fields(api):
    exp_id = await create_experiment(api, ONE)
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["searcherMetric"] == "loss"
    assert exp["hyperparameters"]["lr"]["type"] == "double"
    assert exp["checkpointCount"] == 0 and exp["checkpointSize"] == "0"
    assert exp["bestTrialId"] is None and exp["bestTrialSearcherMetric"] is None
    assert isinstance(exp["duration"], int)
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Trial).where(Trial.experiment_id == exp_id).values(searcher_metric_value=0.25))
    listed = (await api.get("/api/v1/experiments")).json()["experiments"][0]
    trial = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"][0]
    assert listed["bestTrialId"] == trial["id"] and listed["bestTrialSearcherMetric"] == 0.25
    one = (await api.get(f"/api/v1/trials/{trial['id']}")).json()["trial"]
    for t in (trial, one):
        assert t["checkpointCount"] == 0 and t["totalCheckpointSize"] == "0"
        assert t["bestCheckpoint"] is None and t["warmStartCheckpointUuid"] is None
        assert t["wallClockTime"] >= 0
