"""``POST /api/v1/checkpoints/rm`` (``det checkpoint rm UUID --glob``): the matching files of a
checkpoint go, the rest and the row's file list stay consistent (``checkpoint_gc/file_removal.py``)."""

from __future__ import annotations

import uuid

import pytest

from controlplane.master.checkpoint_gc.file_removal import check_globs, matching
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent
from tests.controlplane.master.test_checkpoint_gc import staged, storage_dir
from tests.controlplane.master.test_ownership import add_user, login, running
from tests.controlplane.master.test_task_tokens import task_headers

FILES = {"model.pt": b"w" * 100, "opt.pt": b"o" * 10, "metadata.json": b"{}", "sub/x.pt": b"x" * 7,
         "sub/y.txt": b"y", ".hidden.pt": b"h"}


@pytest.mark.parametrize("globs,expected", [
    (["*.pt"], ["model.pt", "opt.pt"]),  # one component; hidden names only by a pattern that starts with "."
    (["**/*.pt"], ["model.pt", "opt.pt", "sub/x.pt"]),
    (["sub"], ["sub/x.pt", "sub/y.txt"]),  # a directory takes what it holds
    (["sub/"], ["sub/x.pt", "sub/y.txt"]),
    (["m?del.[pq]t", ".h*"], [".hidden.pt", "model.pt"]),
    (["nothing"], []),
])
def test_globs_mean_what_globs_mean(globs, expected):
    assert matching(sorted(FILES), check_globs(globs)) == sorted(expected)


@pytest.mark.parametrize("glob", ["", "../x", "a/../b", "/", "."])
def test_a_glob_that_could_leave_or_name_the_whole_checkpoint_is_refused(glob):
    from controlplane.master.errors import BadRequest

    with pytest.raises(BadRequest, match="checkpointGlobs"):
        check_globs([glob])


async def checkpoint_with_files(api, start: wire.StartTask, steps: int) -> str:
    ckpt = str(uuid.uuid4())
    for rel, data in FILES.items():  # written where the task writes; the report publishes them
        (staged(api, start.allocation_id, ckpt) / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged(api, start.allocation_id, ckpt) / rel).write_bytes(data)
    r = await api.post("/api/v1/checkpoints", headers=task_headers(start.session_token), json={
        "uuid": ckpt, "state": "STATE_COMPLETED", "resources": {k: str(len(v)) for k, v in FILES.items()},
        "metadata": {"steps_completed": steps}})
    assert r.status_code == 200, r.text
    return ckpt


async def test_rm_glob_deletes_the_matching_files_and_keeps_the_row_in_step(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    _, start = await running(api, agent)
    older = await checkpoint_with_files(api, start, 5)
    latest = await checkpoint_with_files(api, start, 10)
    r = await api.post("/api/v1/checkpoints/rm", json={"checkpointUuids": [latest], "checkpointGlobs": ["*.pt"]})
    assert r.status_code == 400 and "latest checkpoint" in r.text, r.text  # the running trial resumes from it
    nora = await add_user(api, "nora")
    r = await api.post("/api/v1/checkpoints/rm", headers=nora,
                       json={"checkpointUuids": [older], "checkpointGlobs": ["*.pt"]})
    assert r.status_code == 403, r.text
    r = await api.post("/api/v1/checkpoints/rm", json={"checkpointUuids": [older], "checkpointGlobs": [""]})
    assert r.status_code == 400 and "empty string glob" in r.text, r.text
    assert sorted(p.name for p in (storage_dir(api) / older).iterdir()) == sorted(
        [".hidden.pt", "metadata.json", "model.pt", "opt.pt", "sub"])

    r = await api.post("/api/v1/checkpoints/rm", json={"checkpointUuids": [older], "checkpointGlobs": ["*.pt", "sub"]})
    assert r.status_code == 200 and r.json() == {}, r.text
    assert sorted(p.name for p in (storage_dir(api) / older).iterdir()) == [".hidden.pt", "metadata.json"]
    ckpt = (await api.get(f"/api/v1/checkpoints/{older}")).json()["checkpoint"]
    assert ckpt["state"] == "STATE_COMPLETED"
    assert ckpt["resources"] == {".hidden.pt": "1", "metadata.json": "2"}

    r = await api.post("/api/v1/checkpoints/rm", json={"checkpointUuids": [older], "checkpointGlobs": ["**/*"]})
    assert r.status_code == 200, r.text  # hidden names stay even under **/* (glob's rule) ...
    r = await api.post("/api/v1/checkpoints/rm", headers=await login(api, "admin"),
                       json={"checkpointUuids": [older], "checkpointGlobs": [".*", "*"]})
    assert r.status_code == 200, r.text  # ... until named; an admin may
    ckpt = (await api.get(f"/api/v1/checkpoints/{older}")).json()["checkpoint"]
    assert ckpt["state"] == "STATE_DELETED" and ckpt["resources"] == {}


async def test_rm_without_a_glob_refreshes_the_file_list_from_storage(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    _, start = await running(api, agent)
    older = await checkpoint_with_files(api, start, 5)
    await checkpoint_with_files(api, start, 10)
    (storage_dir(api) / older / "opt.pt").unlink()
    r = await api.post("/api/v1/checkpoints/rm", json={"checkpointUuids": [older], "checkpointGlobs": []})
    assert r.status_code == 200, r.text
    resources = (await api.get(f"/api/v1/checkpoints/{older}")).json()["checkpoint"]["resources"]
    assert "opt.pt" not in resources and resources["model.pt"] == "100"
