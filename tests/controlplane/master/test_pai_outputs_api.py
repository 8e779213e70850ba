"""OpenPAI outputs through the master's routes, with a fake agent: a task's ``$PAI_OUTPUT_DIR`` sent as
the agent sends it (``controlplane.pai.outputs.tar_chunks``) is kept under the job in the cluster's
``shared_fs`` checkpoint storage, listed in pages and downloaded (one file, an archive), by the owner
or an admin only, and read back only as it was kept."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from controlplane.pai import outputs as out
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent
from tests.support.storage_servers import moto_s3, s3_bucket  # noqa: F401 (fixtures)

JOB_URL = "/api/v1/user/determined/jobs/keep-me"


def job_json(name: str = "keep-me") -> dict[str, Any]:
    return {"jobName": name, "image": "default", "outputDir": "/some/existing/dir", "taskRoles": [
        {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true"}]}


def task_headers(token: str) -> dict[str, str]:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


def tar_of(root: Path) -> bytes:
    """What the agent sends for ``root``."""
    return b"".join(out.tar_chunks(root, out.scan(root)))


async def started_job(api, name: str = "keep-me") -> dict[int, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    r = await api.post("/api/v1/user/determined/jobs", json=job_json(name))
    assert r.status_code == 202, r.text
    got: dict[int, wire.StartTask] = {}
    while len(got) < 2:
        msg = await agent.next_message()
        if isinstance(msg, wire.StartTask):
            await agent.start(msg)
            got[int(msg.env["PAI_TASK_INDEX"])] = msg
    api.agent = agent
    return got


async def user(api, name: str, role: str = "user") -> dict[str, str]:
    admin = (await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"]
    r = await api.post("/api/v1/users", headers={"Authorization": f"Bearer {admin}"},
                       json={"user": {"username": name, "role": role}, "password": "pw", "isHashed": False})
    assert r.status_code == 200, r.text
    token = (await api.post("/api/v1/auth/login", json={"username": name, "password": "pw"})).json()["token"]
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.both_databases  # the list pages by (attempt, task, path) and counts in SQL
async def test_a_tasks_outputs_are_kept_in_checkpoint_storage_listed_in_pages_and_downloaded(api, tmp_path):
    tasks = await started_job(api)
    w0 = tasks[0]
    assert w0.collect_outputs is True  # the agent makes it $PAI_OUTPUT_DIR and keeps it at the end
    fs_uri = w0.env["PAI_DEFAULT_FS_URI"]
    root = api.rt.settings.data_dir / "checkpoints" / out.OUTPUTS_DIR
    assert fs_uri.startswith(f"file://{root}/") and fs_uri == tasks[1].env["PAI_DEFAULT_FS_URI"]

    src = tmp_path / "output"
    (src / "model").mkdir(parents=True)
    (src / "model" / "weights.bin").write_bytes(os.urandom(3000))
    (src / "metrics.json").write_text('{"accuracy": 0.9}')
    (src / "b.txt").write_text("b")
    (tmp_path / "secret").write_text("not an output")
    (src / "leak").symlink_to(tmp_path / "secret")  # never followed
    r = await api.post(f"/api/v1/allocations/{w0.allocation_id}/outputs", content=tar_of(src),
                       headers=task_headers(w0.session_token), params={"leftOut": "1 symlinks (never followed)"})
    assert r.status_code == 200, r.text
    kept = r.json()
    assert kept == {"task": "worker-0", "attempt": 1, "files": 3, "size": 3000 + 17 + 1,
                    "location": f"{fs_uri}/1/worker-0"}
    stored = Path(kept["location"].removeprefix("file://"))
    assert (stored / "model" / "weights.bin").read_bytes() == (src / "model" / "weights.bin").read_bytes()
    assert not (stored / "leak").exists()
    r = await api.post(f"/api/v1/allocations/{w0.allocation_id}/outputs", content=tar_of(src),
                       headers=task_headers(w0.session_token))
    assert r.status_code == 409 and "already kept" in r.json()["message"]

    w1 = tasks[1]
    (tmp_path / "w1").mkdir()
    (tmp_path / "w1" / "a.txt").write_text("from worker-1")
    r = await api.post(f"/api/v1/allocations/{w1.allocation_id}/outputs", content=tar_of(tmp_path / "w1"),
                       headers=task_headers(w1.session_token))
    assert r.status_code == 200, r.text

    page = (await api.get(f"{JOB_URL}/outputs", params={"limit": 2})).json()
    assert page["total"] == 4 and page["location"] == fs_uri and page["limit"] == 2
    assert [(f["task"], f["attempt"], f["path"]) for f in page["outputs"]] == [
        ("worker-0", 1, "b.txt"), ("worker-0", 1, "metrics.json")]
    page = (await api.get(f"{JOB_URL}/outputs", params={"limit": 2, "offset": 2})).json()
    assert [(f["task"], f["path"], f["size"]) for f in page["outputs"]] == [
        ("worker-0", "model/weights.bin", 3000), ("worker-1", "a.txt", 13)]
    page = (await api.get(f"{JOB_URL}/outputs", params={"task": "worker-1"})).json()
    assert [f["path"] for f in page["outputs"]] == ["a.txt"] and page["total"] == 1
    assert (await api.get(f"{JOB_URL}/outputs", params={"attempt": 2})).json()["outputs"] == []

    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0", "path": "model/weights.bin"})
    assert r.status_code == 200 and r.content == (src / "model" / "weights.bin").read_bytes()
    r = await api.get(f"{JOB_URL}/outputs/archive")
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert files == {"worker-0/b.txt": b"b", "worker-0/metrics.json": b'{"accuracy": 0.9}',
                     "worker-0/model/weights.bin": (src / "model" / "weights.bin").read_bytes(),
                     "worker-1/a.txt": b"from worker-1"}


async def test_only_the_owner_or_an_admin_reads_outputs_and_only_a_live_task_keeps_its_own(api, tmp_path):
    tasks = await started_job(api)
    w0, w1 = tasks[0], tasks[1]
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x.txt").write_text("x")
    body = tar_of(tmp_path / "o")
    # a task keeps only its own outputs: its token names its allocation
    r = await api.post(f"/api/v1/allocations/{w0.allocation_id}/outputs", content=body,
                       headers=task_headers(w1.session_token))
    assert r.status_code == 403
    r = await api.post(f"/api/v1/allocations/{w0.allocation_id}/outputs", content=body,
                       headers=task_headers(w0.session_token))
    assert r.status_code == 200, r.text

    nora, vera = await user(api, "nora"), await user(api, "vera", "viewer")
    reads = [(f"{JOB_URL}/outputs", {}), (f"{JOB_URL}/outputs/file", {"task": "worker-0", "path": "x.txt"}),
             (f"{JOB_URL}/outputs/archive", {})]
    for url, params in reads:
        for who in (nora, vera):
            r = await api.get(url, params=params, headers=who)
            assert r.status_code == 403 and "only the owner of job keep-me or an admin" in r.json()["message"], r.text
        r = await api.get(url, params=params, headers=task_headers(w0.session_token))
        assert r.status_code == 403  # not even the job's own task reads them back
    admin = (await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"]
    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0", "path": "x.txt"},
                      headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200 and r.content == b"x"
    # nora's outputs route for her own job: not this one's files
    assert (await api.get("/api/v1/user/nora/jobs/keep-me/outputs", headers=nora)).status_code == 404

    # typed parameters, errors naming the field
    r = await api.get(f"{JOB_URL}/outputs", params={"task": "worker-9"})
    assert r.status_code == 400 and r.json()["message"].startswith("task: job keep-me has no task 'worker-9'")
    r = await api.get(f"{JOB_URL}/outputs", params={"task": "worker"})
    assert r.status_code == 400 and "task" in r.json()["message"]
    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0"})
    assert r.status_code == 400 and r.json()["message"].startswith("path: required")
    r = await api.get(f"{JOB_URL}/outputs", params={"attempt": 0})
    assert r.status_code == 400 and "attempt" in r.json()["message"]
    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0", "path": "y.txt"})
    assert r.status_code == 404 and r.json()["message"].startswith("path: task worker-0 of job keep-me kept no file")
    r = await api.get(f"{JOB_URL}/outputs/archive", params={"task": "worker-1"})
    assert r.status_code == 404 and "kept no outputs" in r.json()["message"]

    # what is read back is what was kept: a file changed in storage is refused, named
    kept = api.rt.settings.data_dir / "checkpoints"
    (next(kept.rglob("worker-0")) / "x.txt").write_text("planted")
    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0", "path": "x.txt"})
    assert r.status_code == 409 and "'x.txt' was changed" in r.json()["message"]

    # a malformed stream keeps nothing; an ended task's token keeps nothing more
    r = await api.post(f"/api/v1/allocations/{w1.allocation_id}/outputs", content=b"not a tar" * 100,
                       headers=task_headers(w1.session_token))
    assert r.status_code == 400 and r.json()["message"].startswith("request body:")
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w") as tar:
        info = tarfile.TarInfo("etc")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(info)
    r = await api.post(f"/api/v1/allocations/{w1.allocation_id}/outputs", content=link.getvalue(),
                       headers=task_headers(w1.session_token))
    assert r.status_code == 400 and "only regular files" in r.json()["message"]
    await api.agent.exit(w1.allocation_id, 0)
    r = await api.post(f"/api/v1/allocations/{w1.allocation_id}/outputs", content=body,
                       headers=task_headers(w1.session_token))
    assert r.status_code == 401
    assert (await api.get(f"{JOB_URL}/outputs")).json()["total"] == 1


async def test_on_s3_storage_they_are_kept_under_the_clusters_prefix_and_read_back(api, request, tmp_path):
    bucket = request.getfixturevalue("s3_bucket")
    api.rt.settings.checkpoint_storage = {**bucket.config, "prefix": "cluster/"}
    w0 = (await started_job(api))[0]
    fs_uri = w0.env["PAI_DEFAULT_FS_URI"]
    assert fs_uri.startswith(f"s3://{bucket.name}/cluster/pai-outputs/")
    (tmp_path / "o" / "ckpt").mkdir(parents=True)
    (tmp_path / "o" / "ckpt" / "model.bin").write_bytes(b"\x00weights")
    r = await api.post(f"/api/v1/allocations/{w0.allocation_id}/outputs", content=tar_of(tmp_path / "o"),
                       headers=task_headers(w0.session_token))
    assert r.status_code == 200 and r.json()["location"] == f"{fs_uri}/1/worker-0", r.text
    key_prefix = fs_uri.removeprefix(f"s3://{bucket.name}/")
    assert bucket.keys(key_prefix) == [f"{key_prefix}/1/worker-0/ckpt/model.bin"]
    r = await api.get(f"{JOB_URL}/outputs/file", params={"task": "worker-0", "path": "ckpt/model.bin"})
    assert r.status_code == 200 and r.content == b"\x00weights"
    listed = (await api.get(f"{JOB_URL}/outputs")).json()
    assert listed["location"] == fs_uri and [f["path"] for f in listed["outputs"]] == ["ckpt/model.bin"]
    assert "secret" not in json.dumps(listed) and "testing" not in json.dumps(listed)  # never the storage's keys
