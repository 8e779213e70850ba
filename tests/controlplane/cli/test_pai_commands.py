"""`det pai ...` against the real master app (SQLite; the routes' SQL runs on both in tests/controlplane/master).

No agent joins, so a submitted job stays WAITING; its log lines are written beside the master,
into its database, as an agent's log shipping would.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
from sqlalchemy import select

from controlplane.cli import pai
from controlplane.master.app import create_app
from controlplane.master.db.engine import make_engine, make_sessionmaker
from controlplane.master.db.models import PaiJob, TaskLog
from controlplane.master.orchestration.pai_jobs import task_id
from controlplane.master.settings import MasterSettings
from tests.controlplane.cli.real_master import RealMaster
from tests.support.cluster import free_port

OWNER_RULE = "only the owner of job mnist-1 or an admin may"


class PaiMaster(RealMaster):
    """RealMaster on the database ``db_url`` names."""

    def __init__(self, data_dir: Path, db_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db_url = db_url
        self.app = create_app(MasterSettings(data_dir=data_dir, db_url=db_url, join_token="t"))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="real-master", daemon=True)

    def db(self, work: Any) -> Any:
        """Run ``await work(session)`` in a transaction of a connection of its own."""
        async def run() -> Any:
            engine = make_engine(self.db_url)
            try:
                async with make_sessionmaker(engine).begin() as session:  # SQLite: the write lock at BEGIN
                    return await work(session)
            finally:
                await engine.dispose()

        return asyncio.run(run())


@pytest.fixture
def master(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, master_db_url: str) -> Iterator[PaiMaster]:
    with PaiMaster(tmp_path / "master", master_db_url) as m:
        monkeypatch.setenv("DET_MASTER", m.url)
        yield m


def job_json(name: str = "mnist-1", **extra: Any) -> dict[str, Any]:
    return {
        "jobName": name,
        "image": "default",
        "authFile": "/secrets/registry.txt",
        "taskRoles": [
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 1024, "gpuNumber": 0,
             "portList": [{"label": "tb", "beginAt": 0, "portNumber": 2}], "command": "python train.py"},
            {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 512, "gpuNumber": 0,
             "command": "python ps.py"},
        ],
        "jobEnvs": {"batch_size": 32},
        **extra,
    }


def write_job(path: Path, job: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=2))
    return str(path)


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in out.rstrip("\n").splitlines()[2:]]


def header(out: str) -> list[str]:
    return [c.strip() for c in out.splitlines()[0].split("|")]


def listed(det) -> list[list[str]]:
    r = det("pai", "list")
    assert r.rc == 0, r.err
    assert header(r.out) == ["Name", "User", "State", "Retries", "Tasks", "GPUs", "Virtual Cluster", "Created"]
    return [row[:7] for row in table_rows(r.out)]


def task_table(out: str) -> list[list[str]]:
    lines = out.split("Tasks:\n", 1)[1]
    assert header(lines) == ["Role", "Index", "State", "IP", "Ports", "Exit Code", "Diagnostics"]
    return table_rows(lines)


def test_bad_job_files_are_refused_here_and_nothing_is_sent(master, det, tmp_path):
    bad = job_json("bad name!")
    bad["taskRoles"][0]["memoryMB"] = 50
    bad["taskRoles"][1]["shmMB"] = 4096
    bad["retryCount"] = -1
    r = det("pai", "submit", write_job(tmp_path / "bad.json", bad))
    assert r.rc == 1 and r.out == ""
    assert r.err == (f"Error: invalid job {tmp_path / 'bad.json'} (4 errors):\n"
                     "  jobName: must match ^[A-Za-z0-9\\-._~]+$\n"
                     "  retryCount: no less than 0\n"
                     "  taskRoles[0].memoryMB: no less than 100\n"
                     "  taskRoles[1].shmMB: no more than memory size (512), got 4096\n")

    (tmp_path / "not.json").write_text("{\"jobName\": \"x\",\n}")
    r = det("pai", "submit", str(tmp_path / "not.json"))
    assert r.rc == 1
    assert r.err == (f"Error: job file {tmp_path / 'not.json'} is not valid JSON: "
                     "Expecting property name enclosed in double quotes (line 2, column 1)\n")
    r = det("pai", "submit", write_job(tmp_path / "list.json", [job_json()]))
    assert r.rc == 1
    assert r.err == (f"Error: job file {tmp_path / 'list.json'} must hold a JSON object (OpenPAI's job protocol), "
                     "got list\n")
    r = det("pai", "submit", str(tmp_path / "missing.json"))
    assert (r.rc, r.err) == (1, f"Error: cannot read job file {tmp_path / 'missing.json'}: No such file or directory\n")
    r = det("pai", "submit", write_job(tmp_path / "hdfs.json", job_json(codeDir="hdfs://nn:9000/code")))
    assert r.rc == 1 and r.err.startswith(f"Error: invalid job {tmp_path / 'hdfs.json'} (1 error):\n"
                                          "  codeDir: HDFS URIs are not supported here")

    assert listed(det) == []
    r = det("pai", "list", "--all", "--json")
    assert (r.rc, json.loads(r.out)) == (0, [])


def test_submit_list_describe_and_a_taken_name(master, det, tmp_path):
    path = write_job(tmp_path / "job.json", job_json())
    r = det("pai", "submit", path)
    assert (r.rc, r.out) == (0, "Submitted job mnist-1\n"), r.err
    assert r.err == ("Warning: authFile: not used: no image is pulled; 'image' names a task environment the agents "
                     "already offer (det agent list)\n")

    assert listed(det) == [["mnist-1", "determined", "WAITING", "0", "3", "0", "default"]]
    r = det("pai", "describe", "mnist-1")
    assert r.rc == 0, r.err
    assert r.out.startswith("Job mnist-1\n  User:              determined\n  State:             WAITING\n")
    assert "  Execution Type:    START\n" in r.out and "  Retries:           0\n" in r.out
    assert [row[:3] for row in task_table(r.out)] == [
        ["worker", "0", "WAITING"], ["worker", "1", "WAITING"], ["ps", "0", "WAITING"]]

    r = det("pai", "submit", path)
    assert (r.rc, r.out) == (1, "")
    assert r.err.endswith("Error: jobName: job mnist-1 already exists for user determined\n")
    assert len(listed(det)) == 1

    r = det("pai", "submit", write_job(tmp_path / "two.json", job_json("mnist-2")), "--json")
    assert r.rc == 0 and json.loads(r.out)["message"] == "update job mnist-2 successfully"
    jobs = json.loads(det("pai", "list", "--json").out)
    assert [(j["name"], j["state"], j["totalTaskNumber"]) for j in jobs] == [("mnist-2", "WAITING", 3),
                                                                             ("mnist-1", "WAITING", 3)]
    detail = json.loads(det("pai", "describe", "mnist-1", "--json").out)
    assert detail["jobStatus"]["state"] == "WAITING" and sorted(detail["taskRoles"]) == ["ps", "worker"]
    r = det("pai", "describe", "nope")
    assert (r.rc, r.err) == (1, "Error: job nope of user determined not found\n")
    r = det("pai", "describe", "a/b")
    assert r.rc == 2 and "expected a job name (at most 128 letters, digits and -._~), got 'a/b'" in r.err


def test_describe_says_why_a_waiting_job_waits(master, det, tmp_path):
    import time

    assert det("pai", "submit", write_job(tmp_path / "job.json", job_json())).rc == 0
    deadline = time.monotonic() + 10  # the orchestrator passes every half second
    while "  Waiting:" not in (r := det("pai", "describe", "mnist-1")).out and time.monotonic() < deadline:
        time.sleep(0.1)
    assert r.rc == 0, r.err
    assert r.out.startswith("Job mnist-1\n  User:              determined\n  State:             WAITING\n"
                            "  Waiting:           no agent of resource pool 'default' is connected\n"
                            "  Execution Type:    START\n"), r.out
    detail = json.loads(det("pai", "describe", "mnist-1", "--json").out)
    assert detail["jobStatus"]["waitingReason"] == "no agent of resource pool 'default' is connected"
    assert det("pai", "stop", "mnist-1").rc == 0
    assert "Waiting:" not in det("pai", "describe", "mnist-1").out


def test_list_pages_newest_first(master, det, tmp_path, monkeypatch):
    for i in range(5):
        assert det("pai", "submit", write_job(tmp_path / f"j{i}.json", job_json(f"job-{i}"))).rc == 0
    monkeypatch.setattr(pai, "LIST_PAGE", 2)
    assert [row[0] for row in listed(det)] == ["job-4", "job-3", "job-2", "job-1", "job-0"]
    r = det("pai", "list", "--limit", "3", "--offset", "1")
    assert [row[0] for row in table_rows(r.out)] == ["job-3", "job-2", "job-1"]
    r = det("pai", "list", "--all", "--offset", "4", "--json")
    assert [j["name"] for j in json.loads(r.out)] == ["job-0"]
    r = det("pai", "list", "--limit", "0")
    assert r.rc == 2 and "expected a number >= 1" in r.err


def test_submit_with_code_dir_uploads_it_and_config_shows_the_json(master, det, tmp_path, monkeypatch):
    jobs = tmp_path / "jobs"
    (jobs / "src" / "data").mkdir(parents=True)
    (jobs / "src" / "train.py").write_text("print('hi')\n")
    (jobs / "src" / "data" / "big.bin").write_bytes(b"\0" * 1000)
    (jobs / "src" / ".detignore").write_text("data/\n")
    job = job_json(codeDir="src")
    write_job(jobs / "job.json", job)
    monkeypatch.chdir(tmp_path)  # codeDir is read relative to the JSON file, not the working directory
    r = det("pai", "submit", "jobs/job.json")
    assert (r.rc, r.out) == (0, "Submitted job mnist-1\n"), r.err

    r = det("pai", "config", "mnist-1")
    assert r.rc == 0 and json.loads(r.out) == job
    assert r.out.startswith('{\n  "jobName": "mnist-1",\n')

    async def code(session) -> bytes:
        return (await session.execute(select(PaiJob.code).where(PaiJob.name == "mnist-1"))).scalar_one()

    with tarfile.open(fileobj=io.BytesIO(master.db(code)), mode="r:*") as tar:  # where it is put is the master's
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert [(Path(name).name, data) for name, data in files.items()] == [("train.py", b"print('hi')\n")]

    write_job(jobs / "missing.json", job_json("mnist-2", codeDir="nope"))
    r = det("pai", "submit", "jobs/missing.json")
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("Error: codeDir: jobs/nope does not exist (codeDir 'nope' is read relative to "
                     "jobs/missing.json's directory)\n")
    (jobs / "src" / "outside").symlink_to(tmp_path)
    write_job(jobs / "link.json", job_json("mnist-3", codeDir="src"))
    r = det("pai", "submit", "jobs/link.json")
    assert r.rc == 1 and r.err.startswith("Error: the symlink outside points outside the context directory")
    assert [row[0] for row in listed(det)] == ["mnist-1"]


def test_stop_and_the_owner_rule(master, det, tmp_path, monkeypatch):
    assert det("pai", "submit", write_job(tmp_path / "job.json", job_json())).rc == 0
    master.add_user("nora", "user")
    monkeypatch.setenv("DET_USER", "nora")
    monkeypatch.setenv("DET_PASS", "pw")
    r = det("-u", "nora", "pai", "stop", "mnist-1", "--user", "determined")
    assert (r.rc, r.out, r.err) == (1, "", f"Error: {OWNER_RULE} edit it\n")
    r = det("-u", "nora", "pai", "config", "mnist-1", "--user", "determined")
    assert (r.rc, r.err) == (1, f"Error: {OWNER_RULE} read own it\n")
    r = det("-u", "nora", "pai", "describe", "mnist-1", "--user", "determined")
    assert r.rc == 0 and "  State:             WAITING\n" in r.out
    r = det("-u", "nora", "pai", "list")
    assert r.rc == 0 and table_rows(r.out) == []
    r = det("-u", "nora", "pai", "list", "--all")
    assert [row[:3] for row in table_rows(r.out)] == [["mnist-1", "determined", "WAITING"]]

    monkeypatch.setenv("DET_USER", "determined")
    monkeypatch.setenv("DET_PASS", "")
    r = det("-u", "determined", "pai", "stop", "mnist-1")
    assert (r.rc, r.out) == (0, "Stopped job mnist-1\n"), r.err
    assert listed(det)[0][:3] == ["mnist-1", "determined", "STOPPED"]
    r = det("pai", "describe", "mnist-1")
    assert "  State:             STOPPED\n" in r.out and "  Execution Type:    STOP\n" in r.out
    assert {row[2] for row in task_table(r.out)} <= {"STOPPED", "WAITING"}
    r = det("pai", "logs", "mnist-1", "--follow")  # a stopped job: the lines so far (none), then the end
    assert (r.rc, r.out, r.err) == (0, "", "Job mnist-1 ended: STOPPED\n")


def test_logs_pages_and_filters(master, det, tmp_path, monkeypatch):
    assert det("pai", "submit", write_job(tmp_path / "job.json", job_json())).rc == 0
    lines = [("worker", 0, "epoch 1\n"), ("ps", 0, "serving\n"), ("worker", 1, "epoch 1\n"),
             ("worker", 0, "epoch 2\n"), ("worker", 1, "no newline")]

    async def add_logs(session) -> None:
        job_id = (await session.execute(select(PaiJob.id).where(PaiJob.name == "mnist-1"))).scalar_one()
        for role, index, text in lines:
            session.add(TaskLog(task_id=task_id(job_id, role, index), allocation_id="", agent_id="a",
                                stdtype="stdout", timestamp=datetime.now(UTC), log=text))
            await session.flush()

    master.db(add_logs)
    monkeypatch.setattr(pai, "LOG_PAGE", 2)
    r = det("pai", "logs", "mnist-1")
    assert (r.rc, r.out) == (0, "[worker-0] epoch 1\n[ps-0] serving\n[worker-1] epoch 1\n[worker-0] epoch 2\n"
                                "[worker-1] no newline\n"), r.err
    r = det("pai", "logs", "mnist-1", "--task-role", "worker", "--task-index", "1")
    assert r.out == "[worker-1] epoch 1\n[worker-1] no newline\n"
    r = det("pai", "logs", "mnist-1", "--task-role", "chief")
    assert (r.rc, r.err) == (1, "Error: taskRole: job mnist-1 has no task role 'chief'\n")
    r = det("pai", "logs", "mnist-1", "--json")
    parsed = [json.loads(line) for line in r.out.splitlines()]
    assert [(p["taskRole"], p["taskIndex"], p["log"]) for p in parsed] == lines

    calls = []

    def sleep(seconds: float) -> None:  # the job ends while the command waits
        calls.append(seconds)
        requests.put(f"{master.url}/api/v1/user/determined/jobs/mnist-1/executionType", json={"value": "STOP"},
                     headers=master.login("determined"), timeout=10).raise_for_status()

    monkeypatch.setattr(pai.time, "sleep", sleep)
    r = det("pai", "logs", "mnist-1", "-f", "--task-role", "ps")
    assert calls == [1.0]
    assert (r.rc, r.out, r.err) == (0, "[ps-0] serving\n", "Job mnist-1 ended: STOPPED\n")
