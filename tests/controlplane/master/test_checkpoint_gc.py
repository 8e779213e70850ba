"""Checkpoint GC in the master: an ended experiment keeps exactly what its save_* policy keeps (in
storage and in the database), registered checkpoints are never collected, `DELETE
/api/v1/checkpoints` deletes files then rows, and a GC that fails half-way converges when re-run."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from controlplane.master.checkpoint_gc.collect import drain
from controlplane.storage import LocalDirectoryStorage, StorageUnavailable
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_metrics_api import report
from tests.controlplane.master.test_trial_lifecycle import task_headers

pytestmark = pytest.mark.both_databases  # deletes of files then rows, half-done and re-run: transactions

LOSSES = {1: [0.9, 0.3, 0.5], 2: [0.8, 0.7, 0.2]}  # per trial, at steps 10, 20, 30


def storage_dir(api) -> Path:
    return api.rt.settings.data_dir / "checkpoints"


async def run_experiment(api, storage: dict | None = None, *, orphan: str | None = None,
                         before_the_end=None) -> tuple[int, dict[tuple[int, int], str]]:
    """Two trials, each writing three checkpoints (files in the default shared_fs storage) and a
    validation loss at each; both complete. Returns the experiment id and {(trial#, steps): uuid}.
    ``before_the_end(uuids)`` runs before the last trial exits: GC starts as the experiment ends."""
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    cfg = {**CONFIG, "max_restarts": 0, **({"checkpoint_storage": storage} if storage else {})}
    exp_id = await create_experiment(api, cfg)
    starts = [await agent.next_message(), await agent.next_message()]
    uuids = {}
    for n, start in enumerate(starts, 1):
        await agent.start(start)
        headers, tid = task_headers(start.session_token), int(start.env["DET_TRIAL_ID"])
        for steps, loss in zip((10, 20, 30), LOSSES[n], strict=False):
            ckpt = str(uuid.uuid4())
            d = staged(api, start.allocation_id, ckpt)  # written where the task writes, published on report
            d.mkdir(parents=True)
            (d / "state.pt").write_bytes(b"w" * steps)
            (d / "metadata.json").write_text("{}")
            r = await api.post(f"/api/v1/trials/{tid}/metrics", headers=headers, json={
                "metrics": report("validation", steps, {"loss": loss})})
            assert r.status_code == 200, r.text
            r = await api.post("/api/v1/checkpoints", headers=headers, json={
                "uuid": ckpt, "taskId": start.task_id, "allocationId": start.allocation_id, "state": "STATE_COMPLETED",
                "resources": {"state.pt": str(steps), "metadata.json": "2"}, "metadata": {"steps_completed": steps}})
            assert r.status_code == 200, r.text
            uuids[(n, steps)] = ckpt
        if orphan and n == 1:  # an upload announced, its files written, then the trial stops before reporting
            staged(api, start.allocation_id, orphan).mkdir(parents=True)
            (staged(api, start.allocation_id, orphan) / "state.pt").write_bytes(b"half")
            r = await api.post("/api/v1/checkpoints", headers=headers, json={
                "uuid": orphan, "allocationId": start.allocation_id, "taskId": start.task_id,
                "state": "STATE_ACTIVE", "resources": {}, "metadata": {"steps_completed": 40}})
            assert r.status_code == 200, r.text
        if before_the_end and n == len(starts):
            await before_the_end(uuids)
        await agent.exit(start.allocation_id, 0)
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_COMPLETED", exp
    return exp_id, uuids


async def states(api, uuids) -> dict[str, str]:
    return {u: (await api.get(f"/api/v1/checkpoints/{u}")).json()["checkpoint"]["state"] for u in uuids}


def on_disk(api) -> set[str]:
    """The published checkpoints (not the tasks' staging directories)."""
    return {p.name for p in storage_dir(api).iterdir() if p.is_dir() and not p.name.startswith(".")}


def staged(api, allocation_id: str, ckpt: str) -> Path:
    return storage_dir(api) / ".staging" / allocation_id / ckpt


async def until(predicate, what: str, timeout_s: float = 15.0):
    """The master's GC loop runs on its own when an experiment ends: wait for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := await predicate():
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def settled(api, uuids, count: int) -> dict[str, str]:
    """States once `count` checkpoints are deleted and none is being deleted."""
    async def check():
        st = await states(api, uuids)
        done = list(st.values()).count("STATE_DELETED") == count and "STATE_PARTIALLY_DELETED" not in st.values()
        return st if done else None

    return await until(check, f"{count} checkpoints to be deleted")


async def test_an_ended_experiment_keeps_exactly_what_its_policy_keeps(api):
    # Determined's defaults: each trial's best (trial 1: 0.3 at 20; trial 2: 0.2 at 30) and latest (30).
    exp_id, u = await run_experiment(api)
    kept = {u[(1, 20)], u[(1, 30)], u[(2, 30)]}
    st = await settled(api, u.values(), 3)
    assert on_disk(api) == kept
    assert {k for k, v in st.items() if v == "STATE_COMPLETED"} == kept
    assert {v for k, v in st.items() if k not in kept} == {"STATE_DELETED"}
    gone = (await api.get(f"/api/v1/checkpoints/{u[(1, 10)]}")).json()["checkpoint"]
    assert gone["resources"] == {} and "save_trial_best=1" in gone["deletion"]["reason"]
    listed = (await api.get(f"/api/v1/experiments/{exp_id}/checkpoints")).json()["checkpoints"]
    assert len(listed) == 6  # deleted ones stay listed, as deleted
    again = await drain(api.rt)  # idempotent: nothing more to do
    assert again.deleted == [] and on_disk(api) == kept


async def test_a_registered_checkpoint_survives_gc(api):
    storage = {"type": "shared_fs", "host_path": str(storage_dir(api)), "save_experiment_best": 0,
               "save_trial_best": 0, "save_trial_latest": 0}

    async def register(uuids: dict[tuple[int, int], str]) -> None:  # while it runs: GC starts as it ends
        assert (await api.post("/api/v1/models", json={"name": "spirals"})).status_code == 200
        r = await api.post("/api/v1/models/spirals/versions", json={"checkpointUuid": uuids[(1, 10)]})
        assert r.status_code == 200, r.text

    _, u = await run_experiment(api, storage, before_the_end=register)
    await settled(api, u.values(), 5)
    assert on_disk(api) == {u[(1, 10)]}
    assert (await states(api, [u[(1, 10)]])) == {u[(1, 10)]: "STATE_COMPLETED"}


async def test_checkpoint_rm_deletes_files_then_rows_and_refuses_what_it_must(api):
    _, u = await run_experiment(api)
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": [u[(2, 30)]]})
    assert r.status_code == 200 and r.json()["deleted"] == [u[(2, 30)]], r.text
    assert u[(2, 30)] not in on_disk(api)
    assert (await states(api, [u[(2, 30)]])) == {u[(2, 30)]: "STATE_DELETED"}
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": ["nope-0000-1111"]})
    assert r.status_code == 404 and "nope-0000-1111" in r.json()["message"]
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": []})
    assert r.status_code == 400 and "checkpointUuids" in r.json()["message"]
    await api.post("/api/v1/models", json={"name": "m"})
    await api.post("/api/v1/models/m/versions", json={"checkpointUuid": u[(1, 20)]})
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": [u[(1, 10)], u[(1, 20)]]})
    assert r.status_code == 400 and "model registry" in r.json()["message"]
    assert u[(1, 10)] in on_disk(api)  # nothing of a refused request is deleted
    # A deleted checkpoint's download says so.
    r = await api.get(f"/checkpoints/{u[(2, 30)]}")
    assert r.status_code == 404 and "was deleted" in r.json()["message"]


async def test_the_latest_checkpoint_of_a_running_trial_is_not_deleted(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    start = await agent.next_message()
    await agent.start(start)
    ckpt = str(uuid.uuid4())
    staged(api, start.allocation_id, ckpt).mkdir(parents=True)
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "allocationId": start.allocation_id, "taskId": start.task_id, "state": "STATE_COMPLETED",
        "resources": {}, "metadata": {"steps_completed": 5}})
    assert r.status_code == 200
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": [ckpt]})
    assert r.status_code == 400 and "would resume from it" in r.json()["message"]


async def test_gc_that_fails_half_way_converges_when_run_again(api, monkeypatch: pytest.MonkeyPatch):
    real_delete = LocalDirectoryStorage.delete
    outage = {"on": True}

    def flaky_delete(self, ckpt_uuid):
        weights = self.base / ckpt_uuid / "state.pt"
        if outage["on"] and weights.exists() and weights.stat().st_size == 10:  # the step-10 checkpoints
            weights.unlink()  # half of its files are gone, then the store fails
            raise StorageUnavailable(f"storage outage while deleting {ckpt_uuid}")
        return real_delete(self, ckpt_uuid)

    monkeypatch.setattr(LocalDirectoryStorage, "delete", flaky_delete)
    _, u = await run_experiment(api)
    doomed = {u[(1, 10)], u[(2, 10)], u[(2, 20)]}
    victims = {u[(1, 10)], u[(2, 10)]}

    async def failed_once():
        cs = [(await api.get(f"/api/v1/checkpoints/{v}")).json()["checkpoint"] for v in victims]
        return cs if all(c.get("deletion", {}).get("error") for c in cs) else None

    for c in await until(failed_once, "the first GC pass to fail half-way"):
        # Never a usable-looking row over missing files: it says it is being deleted, and why not yet.
        assert c["state"] == "STATE_PARTIALLY_DELETED" and "storage outage" in c["deletion"]["error"]
        assert [p.name for p in (storage_dir(api) / c["uuid"]).iterdir()] == ["metadata.json"]
    st = await states(api, u.values())
    assert {k for k, v in st.items() if v == "STATE_DELETED"} == doomed - victims
    outage["on"] = False
    again = await api.rt.checkpoint_gc.run_once(now=1e9)  # re-run (past any backoff)
    assert set(again.deleted) == victims and again.failed == {}
    assert on_disk(api) == set(u.values()) - doomed
    st = await states(api, u.values())
    assert {k for k, v in st.items() if v == "STATE_DELETED"} == doomed


async def test_files_of_an_upload_never_reported_complete_are_removed_when_the_experiment_ends(api):
    orphan = str(uuid.uuid4())
    _, u = await run_experiment(api, orphan=orphan)
    st = await settled(api, [*u.values(), orphan], 4)
    assert st[orphan] == "STATE_DELETED" and orphan not in on_disk(api)
    assert not (storage_dir(api) / ".staging").exists() or not any((storage_dir(api) / ".staging").iterdir())
    c = (await api.get(f"/api/v1/checkpoints/{orphan}")).json()["checkpoint"]
    assert "upload never completed" in c["deletion"]["reason"]
    trial = (await api.get(f"/api/v1/trials/{c['training']['trialId']}")).json()["trial"]
    assert trial["latestCheckpointUuid"] != orphan  # an announced upload is never a resume point


async def test_a_checkpoint_rm_that_fails_is_retried_by_the_gc_loop(api, monkeypatch: pytest.MonkeyPatch):
    _, u = await run_experiment(api)
    await settled(api, u.values(), 3)
    target = u[(2, 30)]
    real_delete = LocalDirectoryStorage.delete
    outage = {"on": True}

    def flaky_delete(self, ckpt_uuid):
        if outage["on"]:
            raise StorageUnavailable(f"storage outage while deleting {ckpt_uuid}")
        return real_delete(self, ckpt_uuid)

    monkeypatch.setattr(LocalDirectoryStorage, "delete", flaky_delete)
    r = await api.request("DELETE", "/api/v1/checkpoints", json={"checkpointUuids": [target]})
    assert r.status_code == 200 and target in r.json()["failed"], r.text
    outage["on"] = False
    await settled(api, u.values(), 4)  # the loop picked it up again on its own
    assert target not in on_disk(api)
