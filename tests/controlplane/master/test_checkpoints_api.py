"""Checkpoint reports: stored once, moving the resume point forward only, listed per experiment."""

from __future__ import annotations

import uuid

import pytest

from tests.controlplane.master.test_metrics_api import report, running_trial

pytestmark = pytest.mark.both_databases  # checkpoint metadata is a JSON column; resume points move under concurrency


async def test_report_then_list_and_describe(api):
    exp_id, tid, h = await running_trial(api)
    await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": [report("validation", 20, {"loss": 0.3})]},
                   headers=h)
    uuids = []
    for steps in (20, 10):  # a late report of an older checkpoint must not roll the trial back
        u = str(uuid.uuid4())
        uuids.append(u)
        body = {"uuid": u, "resources": {"state.pt": "100", "metadata.json": "20"}, "state": "STATE_COMPLETED",
                "metadata": {"steps_completed": steps}, "training": {}}
        assert (await api.post("/api/v1/checkpoints", json=body, headers=h)).status_code == 200
        assert (await api.post("/api/v1/checkpoints", json=body, headers=h)).status_code == 200  # retry
    trial = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]
    assert trial["latestCheckpointUuid"] == uuids[0]
    ckpt = (await api.get(f"/api/v1/checkpoints/{uuids[0]}")).json()["checkpoint"]
    assert ckpt["training"]["trialId"] == tid and ckpt["training"]["searcherMetric"] == 0.3
    assert ckpt["resources"] == {"state.pt": "100", "metadata.json": "20"}
    listed = (await api.get(
        f"/api/v1/experiments/{exp_id}/checkpoints?sortByAttr=SORT_BY_SEARCHER_METRIC&limit=1")).json()
    assert [c["uuid"] for c in listed["checkpoints"]] == [uuids[0]] and listed["pagination"]["total"] == 2


async def test_bad_checkpoint_reports(api):
    _, _, h = await running_trial(api)
    cases = [({"uuid": "x"}, "uuid"), ({"uuid": str(uuid.uuid4()), "metadata": {}}, "metadata.steps_completed"),
             ({"uuid": str(uuid.uuid4()), "metadata": {"steps_completed": 1}, "resources": {"../x": "1"}}, "escapes")]
    for body, needle in cases:
        r = await api.post("/api/v1/checkpoints", json=body, headers=h)
        assert r.status_code == 400 and needle in r.json()["message"], r.text
    assert (await api.get(f"/api/v1/checkpoints/{uuid.uuid4()}")).status_code == 404
