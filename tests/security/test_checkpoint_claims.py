"""Red team: a trial claims, as its checkpoint, a directory it never staged.

The attack (the issue's): bob's trial POSTs ``/api/v1/checkpoints`` with its own allocation token and
a ``uuid`` that names a directory already in the storage (another cluster's checkpoint, a deleted
row's leftovers, a root-only ``deadbeef-0000-1111/secret.txt`` 0700/0600, alice's OpenPAI outputs);
the old master found nothing staged, "locked the directory down" where it was (chown root, 0555,
0444), recorded it as bob's checkpoint, served it to a viewer through ``GET /checkpoints/<uuid>`` and
deleted it as root on bob's ``DELETE /api/v1/checkpoints``. Variants: bob's task replaces its own
staging path (``<staging>/<storage_path>``) by a symbolic link to the secret's directory, so the
master's rename would move the secret in; bob announces the uuid (``STATE_ACTIVE``) and lets GC
delete "what his upload left"; bob points his experiment's storage_path into ``pai-outputs``.

Each must fail: the claim is a 4xx naming the uuid, the directory keeps its owner, modes and files,
a viewer downloads nothing, GC and ``DELETE`` remove nothing of it, and alice still reads her outputs.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import yaml

from controlplane.pai import outputs as out
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent
from tests.controlplane.master.test_checkpoint_gc import until
from tests.controlplane.master.test_ownership import add_user

SECRET = "deadbeef-0000-1111"  # hex-named: what a checkpoint uuid looks like
ONE_TRIAL = {**CONFIG, "max_restarts": 0, "searcher": {**CONFIG["searcher"], "max_trials": 1}}


def task(start: wire.StartTask) -> dict[str, str]:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {start.session_token}", "Authorization": ""}


def storage_root(api) -> Path:
    return Path(api.rt.settings.default_checkpoint_storage()["host_path"])


def root_only_secret(parent: Path) -> Path:
    """A directory the master never made: 0700 with a 0600 file (root's where the tests run as root)."""
    secret = parent / SECRET
    secret.mkdir(parents=True)
    (secret / "secret.txt").write_text("root only")
    os.chmod(secret / "secret.txt", 0o600)
    os.chmod(secret, 0o700)
    return secret


def snapshot(path: Path) -> dict[str, tuple[int, int, bytes]]:
    """Owner, mode and bytes of a directory and each file in it."""
    found = {".": (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode), b"")}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        found[p.relative_to(path).as_posix()] = (st.st_uid, stat.S_IMODE(st.st_mode),
                                                 p.read_bytes() if p.is_file() else b"")
    return found


async def bobs_trial(api, bob: dict, config: dict | None = None) -> tuple[FakeAgent, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    r = await api.post("/api/v1/experiments", headers=bob, json={
        "config": yaml.safe_dump(config or ONE_TRIAL), "modelDefinition": []})
    assert r.status_code == 200, r.text
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    return agent, start


def claim(start: wire.StartTask, ckpt: str, state: str = "STATE_COMPLETED") -> dict:
    return {"uuid": ckpt, "allocationId": start.allocation_id, "taskId": start.task_id, "state": state,
            "resources": {"secret.txt": "9"}, "metadata": {"steps_completed": 1}}


async def test_a_trial_cannot_claim_a_directory_it_did_not_stage(api):
    bob, viewer = await add_user(api, "bob"), await add_user(api, "vera", "viewer")
    secret = root_only_secret(storage_root(api))
    before = snapshot(secret)
    agent, start = await bobs_trial(api, bob)

    r = await api.post("/api/v1/checkpoints", headers=task(start), json=claim(start, SECRET))
    assert r.status_code == 409 and SECRET in r.json()["message"] and "not staged" in r.json()["message"], r.text
    assert snapshot(secret) == before  # not chowned, not chmodded, nothing added or taken
    assert (await api.get(f"/checkpoints/{SECRET}", headers=viewer)).status_code == 404
    assert (await api.get(f"/api/v1/checkpoints/{SECRET}", headers=viewer)).status_code == 404  # never recorded
    r = await api.request("DELETE", "/api/v1/checkpoints", headers=bob, json={"checkpointUuids": [SECRET]})
    assert r.status_code == 404 and secret.is_dir()

    # Announced instead (an upload "in progress"), then the experiment ends: GC deletes what the row
    # owns, and a shared_fs row owns nothing until the master published it from the staging directory.
    r = await api.post("/api/v1/checkpoints", headers=task(start), json=claim(start, SECRET, "STATE_ACTIVE"))
    assert r.status_code == 200, r.text
    assert (await api.get(f"/checkpoints/{SECRET}", headers=viewer)).status_code == 404
    await agent.exit(start.allocation_id, 1)

    async def collected() -> bool:
        ckpt = (await api.get(f"/api/v1/checkpoints/{SECRET}", headers=viewer)).json()["checkpoint"]
        return ckpt["state"] == "STATE_DELETED"

    await until(collected, "the announced checkpoint to be collected with its experiment")
    assert snapshot(secret) == before


async def test_a_staging_path_swapped_for_a_link_moves_nothing_into_storage(api):
    """``<staging>/team`` is bob's own directory; he makes it a link to where the secret is, so
    ``<staging>/team/<uuid>`` is the secret, and reports that uuid."""
    bob, viewer = await add_user(api, "bob"), await add_user(api, "vera", "viewer")
    elsewhere = storage_root(api).parent / "elsewhere"
    secret = root_only_secret(elsewhere)
    before = snapshot(secret)
    _, start = await bobs_trial(api, bob, {**ONE_TRIAL, "checkpoint_storage": {"storage_path": "team"}})
    staging = storage_root(api) / ".staging" / start.allocation_id
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "team").symlink_to(elsewhere, target_is_directory=True)

    r = await api.post("/api/v1/checkpoints", headers=task(start), json=claim(start, SECRET))
    assert r.status_code == 400 and "storage_path" in r.json()["message"] and "link" in r.json()["message"], r.text
    assert snapshot(secret) == before and not (storage_root(api) / "team" / SECRET).exists()
    assert (await api.get(f"/checkpoints/{SECRET}", headers=viewer)).status_code == 404

    # The checkpoint itself a link to the secret: refused the same way, the link left where it was.
    (staging / "team").unlink()
    (staging / "team").mkdir()
    (staging / "team" / SECRET).symlink_to(secret, target_is_directory=True)
    r = await api.post("/api/v1/checkpoints", headers=task(start), json=claim(start, SECRET))
    assert r.status_code == 400 and SECRET in r.json()["message"], r.text
    assert snapshot(secret) == before and (staging / "team" / SECRET).is_symlink()
    assert not (storage_root(api) / "team" / SECRET).exists()


async def test_alices_pai_outputs_cannot_be_claimed_or_deleted_as_a_checkpoint(api, tmp_path):
    alice, bob = await add_user(api, "alice"), await add_user(api, "bob")
    viewer = await add_user(api, "vera", "viewer")
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    job = {"jobName": "results", "image": "default", "taskRoles": [  # its task "deadbeef-0" is hex-named
        {"name": "deadbeef", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true"}]}
    assert (await api.post("/api/v1/user/alice/jobs", headers=alice, json=job)).status_code == 202
    pai_task = await agent.next_message()
    assert isinstance(pai_task, wire.StartTask)
    await agent.start(pai_task)
    src = tmp_path / "output"
    src.mkdir()
    (src / "model.bin").write_bytes(b"alice's weights")
    r = await api.post(f"/api/v1/allocations/{pai_task.allocation_id}/outputs", headers=task(pai_task),
                       content=b"".join(out.tar_chunks(src, out.scan(src))))
    assert r.status_code == 200, r.text
    job_dir = Path(pai_task.env["PAI_DEFAULT_FS_URI"].removeprefix("file://"))
    kept = job_dir / "1" / "deadbeef-0"  # attempt 1
    assert (kept / "model.bin").read_bytes() == b"alice's weights"
    before = snapshot(job_dir)

    for storage_path in (f"{out.OUTPUTS_DIR}/{job_dir.name}/1", f"{out.OUTPUTS_DIR}/{job_dir.name}", out.OUTPUTS_DIR):
        r = await api.post("/api/v1/experiments", headers=bob, json={"config": yaml.safe_dump(
            {**ONE_TRIAL, "checkpoint_storage": {"storage_path": storage_path}}), "modelDefinition": []})
        assert r.status_code == 400 and "checkpoint_storage.storage_path" in r.json()["message"], r.text
    # On the default storage (the one place left to him) the name is no directory of hers.
    _, start = await bobs_trial(api, bob)
    r = await api.post("/api/v1/checkpoints", headers=task(start), json=claim(start, "deadbeef-0"))
    assert r.status_code == 200, r.text  # a report without files: recorded, owning none
    assert (await api.get("/checkpoints/deadbeef-0", headers=viewer)).status_code == 404
    assert snapshot(job_dir) == before
    r = await api.get("/api/v1/user/alice/jobs/results/outputs/archive", headers=alice)
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        assert tar.extractfile("deadbeef-0/model.bin").read() == b"alice's weights"  # type: ignore[union-attr]
