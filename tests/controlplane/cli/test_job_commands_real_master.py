"""`det job` against the real master app: the seed's 8-character ids name jobs in `update`,
`--ahead-of`, `--behind-of` and `update-batch`, and a batch with a bad operation changes nothing."""

from __future__ import annotations

import json
import re

import pytest

CONFIG = """\
name: queued
entrypoint: python3 train.py
hyperparameters:
  lr: 0.1
searcher:
  name: single
  metric: loss
  max_length:
    batches: 10
"""


def table_rows(out: str) -> list[list[str]]:
    """The table's rows: the lines under its header, up to the "Waiting:" lines after a blank one."""
    table = out.rstrip("\n").split("\n\n")[0]
    return [[c.strip() for c in line.split("|")] for line in table.splitlines()[2:]]


def waiting(out: str) -> dict[str, str]:
    """Short job id -> why it waits, from the lines under the table."""
    _, _, lines = out.partition("\nWaiting:\n")
    return dict(line.strip().split("  ", 1) for line in lines.splitlines() if line.strip())


@pytest.fixture
def three_jobs(real_master, det, tmp_path) -> list[str]:
    """Three queued experiments (no agents): their full job ids, in queue order."""
    (tmp_path / "exp.yaml").write_text(CONFIG)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "train.py").write_text("print('hi')\n")
    for _ in range(3):
        r = det("experiment", "create", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx"))
        assert re.fullmatch(r"Created experiment \d+\n", r.out), r.err
    return [j["jobId"] for j in json.loads(det("job", "list", "--json").out)]


def shown(det) -> list[str]:
    r = det("job", "list")
    assert r.rc == 0, r.err
    return [row[1] for row in table_rows(r.out)]


def test_the_seeds_short_ids_name_jobs(three_jobs, det):
    a, b, c = three_jobs
    assert all(len(j) == 36 for j in three_jobs)
    assert shown(det) == [a[:8], b[:8], c[:8]]
    r = det("job", "update", c[:8], "--ahead-of", a[:8])
    assert (r.rc, r.out) == (0, f"Updated job {c[:8]}: ahead of {a[:8]}\n"), r.err
    assert shown(det) == [c[:8], a[:8], b[:8]]
    assert det("job", "update", c[:8], "--behind-of", b[:8]).rc == 0
    assert shown(det) == [a[:8], b[:8], c[:8]]
    r = det("job", "update-batch", f"{b[:8]}.priority=5", f"{c[:8]}.ahead-of={b[:8]}")
    assert r.rc == 0, r.err
    assert shown(det) == [c[:8], b[:8], a[:8]]


def test_too_short_an_id_names_the_field(three_jobs, det):
    r = det("job", "update", "abcdef1", "--priority", "5")
    assert r.rc == 1
    assert r.err.strip() == ("Error: updates[0].jobId: 'abcdef1' is too short to name a job: give its full id or at "
                             "least 8 of its first characters")
    r = det("job", "update", three_jobs[0][:7], "--priority", "5")
    assert r.rc == 1 and r.err.startswith("Error: updates[0].jobId: ") and "is too short to name a job" in r.err


def test_update_batch_is_all_or_nothing(three_jobs, det):
    a, b, c = three_jobs
    r = det("job", "update-batch", f"{a[:8]}.priority=5", f"{c[:8]}.ahead-of={a[:8]}", f"{b[:8]}.weight=2")
    assert r.rc == 1 and r.out == ""
    assert r.err.startswith(f"Error: operation '{b[:8]}.weight=2': updates[2].weight: weight applies only under "
                            "the fair_share scheduler")
    assert r.err.rstrip().endswith("(nothing was changed)")
    jobs = json.loads(det("job", "list", "--json").out)
    assert [(j["jobId"], j["priority"]) for j in jobs] == [(a, 42), (b, 42), (c, 42)]


def test_the_list_shows_each_jobs_type(three_jobs, real_master, det):
    """Commands, shells and OpenPAI jobs wait in the queue with the experiments, each with its type."""
    import requests

    headers = real_master.login("determined")
    r = requests.post(f"{real_master.url}/api/v1/commands", headers=headers, timeout=10,
                      json={"config": {"entrypoint": "true", "description": "say true"}})
    assert r.status_code == 200, r.text
    command = r.json()["command"]["id"]
    r = requests.post(f"{real_master.url}/api/v1/user/determined/jobs", headers=headers, timeout=10,
                      json={"jobName": "pj", "image": "default", "taskRoles": [
                          {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 1,
                           "command": "true"}]})
    assert r.status_code == 202, r.text
    r = det("job", "update", command[:8], "--ahead-of", three_jobs[0][:8])
    assert r.rc == 0, r.err
    r = det("job", "list")
    assert r.rc == 0, r.err
    assert [(row[1], row[2], row[3]) for row in table_rows(r.out)] == [
        (command[:8], "COMMAND", "say true"), (three_jobs[0][:8], "EXPERIMENT", "queued (1)"),
        (three_jobs[1][:8], "EXPERIMENT", "queued (2)"), (three_jobs[2][:8], "EXPERIMENT", "queued (3)"),
        (table_rows(r.out)[4][1], "GENERIC", "pj")]
    # no agent: each says why it waits, under the table (the orchestrator has passed once at least)
    assert set(waiting(r.out).values()) <= {"no agent of resource pool 'default' is connected"}
