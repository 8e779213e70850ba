"""`det pai output` against the real master app (SQLite): a task's outputs are sent as its agent sends
them (its allocation token made live in the database, as a placement would), then listed and
downloaded by their owner, and refused to another user."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from controlplane.cli import pai_output
from controlplane.master.db.models import Allocation, PaiJob
from controlplane.master.token_cache import token_hash
from controlplane.pai import outputs as out
from controlplane.state import allocation as A
from tests.controlplane.cli.test_pai_commands import PaiMaster, table_rows, write_job

JOB = {"jobName": "mnist-1", "image": "default", "taskRoles": [
    {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0, "command": "true"}]}


@pytest.fixture
def master(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, master_db_url: str):
    with PaiMaster(tmp_path / "master", master_db_url) as m:
        monkeypatch.setenv("DET_MASTER", m.url)
        yield m


def keep(master: PaiMaster, index: int, files: dict[str, bytes], tmp_path: Path) -> None:
    """What worker-``index``'s agent does when the task ends: its allocation made live first."""
    token = secrets.token_urlsafe(16)

    async def live(session) -> str:
        job_id = (await session.execute(select(PaiJob.id).where(PaiJob.name == "mnist-1"))).scalar_one()
        alloc = (await session.execute(select(Allocation).where(
            Allocation.pai_job_id == job_id, Allocation.task_index == index))).scalar_one()
        alloc.state, alloc.token_hash = A.RUNNING, token_hash(token)
        return alloc.id

    alloc_id = master.db(live)
    src = tmp_path / f"out-{index}"
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    r = requests.post(f"{master.url}/api/v1/allocations/{alloc_id}/outputs", timeout=30,
                      data=b"".join(out.tar_chunks(src, out.scan(src))),
                      headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    assert r.status_code == 200, r.text


def test_output_lists_in_pages_and_downloads_each_tasks_files(master, det, tmp_path, monkeypatch):
    assert det("pai", "submit", write_job(tmp_path / "job.json", JOB)).rc == 0
    r = det("pai", "output", "mnist-1")
    assert (r.rc, r.out) == (0, "Job mnist-1 kept no outputs (a task's $PAI_OUTPUT_DIR is kept when it ends)\n")
    r = det("pai", "output", "mnist-1", "--to", str(tmp_path / "none"))
    assert (r.rc, r.err) == (1, "Error: job mnist-1 kept no outputs: nothing to download\n")

    weights = os.urandom(5000)
    keep(master, 0, {"model/weights.bin": weights, "log.txt": b"epoch 1\n"}, tmp_path)
    keep(master, 1, {"log.txt": b"epoch 1 of worker-1\n"}, tmp_path)
    monkeypatch.setattr(pai_output, "PAGE", 2)  # three files: two pages
    r = det("pai", "output", "mnist-1")
    assert r.rc == 0, r.err
    assert table_rows(r.out) == [["worker-0", "1", "log.txt", "8 B"], ["worker-0", "1", "model/weights.bin", "4.9 KiB"],
                                 ["worker-1", "1", "log.txt", "20 B"]]
    assert r.err.startswith("\nKept at file://") and "/pai-outputs/" in r.err
    r = det("pai", "output", "mnist-1", "--task", "worker-1", "--json")
    assert [(f["task"], f["path"], f["size"]) for f in json.loads(r.out)] == [("worker-1", "log.txt", 20)]

    r = det("pai", "output", "mnist-1", "--to", str(tmp_path / "got"))
    assert (r.rc, r.out) == (0, f"Downloaded 3 files of job mnist-1 (attempt 1, 2 tasks) into {tmp_path / 'got'}\n")
    assert (tmp_path / "got" / "worker-0" / "model" / "weights.bin").read_bytes() == weights
    assert (tmp_path / "got" / "worker-1" / "log.txt").read_bytes() == b"epoch 1 of worker-1\n"
    r = det("pai", "output", "mnist-1", "--task", "worker-0", "--to", str(tmp_path / "one"))
    assert r.rc == 0 and sorted(p.name for p in (tmp_path / "one").iterdir()) == ["worker-0"]

    r = det("pai", "output", "mnist-1", "--task", "chief")
    assert r.rc == 2 and "expected a task as <role>-<index>" in r.err
    r = det("pai", "output", "mnist-1", "--task", "chief-0")
    assert r.rc == 1 and r.err.startswith("Error: task: job mnist-1 has no task 'chief-0'")

    master.add_user("nora", "user")
    monkeypatch.setenv("DET_USER", "nora")
    monkeypatch.setenv("DET_PASS", "pw")
    r = det("-u", "nora", "pai", "output", "mnist-1", "--user", "determined")
    assert (r.rc, r.err) == (1, "Error: only the owner of job mnist-1 or an admin may read own it\n")
