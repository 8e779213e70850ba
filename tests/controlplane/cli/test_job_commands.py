"""`det job list|update|update-batch` against the fake master: requests, tables, JSON, errors."""

from __future__ import annotations

import json

import pytest

NULLS = {"priority": None, "weight": None, "resourcePool": None, "aheadOf": None, "behindOf": None}


def table_rows(out: str) -> list[list[str]]:
    lines = out.rstrip("\n").splitlines()
    return [[c.strip() for c in line.split("|")] for line in lines[2:]]


def header(out: str) -> list[str]:
    return [c.strip() for c in out.splitlines()[0].split("|")]


def queue_updates(fake_master) -> list[dict]:
    return [json.loads(r.body) for r in fake_master.calls("POST", "/api/v1/job-queues")]


# ---- list -----------------------------------------------------------------------------------
def test_job_list_table_for_the_default_pool(fake_master, det):
    r = det("job", "list")
    assert r.rc == 0, r.err
    assert header(r.out) == ["#", "ID", "Type", "Job Name", "Priority", "Submitted", "Slots (acquired/needed)",
                             "Status", "User"]
    assert table_rows(r.out) == [
        ["0", "job-1", "EXPERIMENT", "exp-1 (1)", "10", "2025-03-20 12:00:01+0000", "2/2", "Scheduled", "determined"],
        ["1", "job-2", "EXPERIMENT", "exp-2 (2)", "42", "2025-03-20 12:00:02+0000", "0/4", "Queued", "determined"],
        ["2", "job-3", "EXPERIMENT", "exp-3 (3)", "50", "2025-03-20 12:00:03+0000", "0/1", "Queued", "alice"],
    ]
    pools_call = fake_master.calls("GET", "/api/v1/resource-pools")
    jobs_call = fake_master.calls("GET", "/api/v1/job-queues-v2")
    assert len(pools_call) == 1 and len(jobs_call) == 1
    assert fake_master.state.requests.index(pools_call[0]) < fake_master.state.requests.index(jobs_call[0])
    assert jobs_call[0].query == {"resourcePool": ["default"], "limit": ["100"], "offset": ["0"],
                                  "orderBy": ["ORDER_BY_ASC"]}


def test_job_list_alias_and_fair_share_pool_shows_weight(fake_master, det):
    r = det("job", "ls", "--resource-pool", "fair")
    assert r.rc == 0, r.err
    assert header(r.out)[4] == "Weight"
    assert table_rows(r.out) == [["0", "job-4", "EXPERIMENT", "exp-4 (4)", "2.5", "2025-03-20 12:00:04+0000", "0/2",
                                  "Queued", "determined"]]
    assert fake_master.calls("GET", "/api/v1/job-queues-v2")[0].query["resourcePool"] == ["fair"]
    assert det("j", "ls", "-p", "fair").out == r.out


def test_job_list_follows_pagination(fake_master, det):
    fake_master.state.job_page_cap = 2
    r = det("job", "list", "--json")
    assert r.rc == 0, r.err
    assert [j["jobId"] for j in json.loads(r.out)] == ["job-1", "job-2", "job-3"]
    offsets = [c.query["offset"] for c in fake_master.calls("GET", "/api/v1/job-queues-v2")]
    assert offsets == [["0"], ["2"]]


def test_job_list_json_is_the_plain_job_list(fake_master, det):
    r = det("job", "list", "--json")
    assert r.rc == 0, r.err
    jobs = json.loads(r.out)
    assert isinstance(jobs, list) and len(jobs) == 3
    assert jobs[0]["jobId"] == "job-1" and jobs[0]["summary"] == {"state": "STATE_SCHEDULED", "jobsAhead": 0}
    assert "full" not in jobs[0]


def test_job_list_reverse_asks_for_descending_order(fake_master, det):
    r = det("job", "list", "--reverse")
    assert r.rc == 0, r.err
    assert [row[1] for row in table_rows(r.out)] == ["job-3", "job-2", "job-1"]
    assert fake_master.calls("GET", "/api/v1/job-queues-v2")[0].query["orderBy"] == ["ORDER_BY_DESC"]


def test_job_list_unknown_pool(fake_master, det):
    r = det("job", "list", "-p", "nope")
    assert r.rc == 1
    assert r.err.strip() == "Error: Pool nope not found"
    assert "Traceback" not in r.err
    assert fake_master.calls("GET", "/api/v1/job-queues-v2") == []


def test_job_list_without_a_default_compute_pool(fake_master, det):
    for p in fake_master.state.pools:
        p["defaultComputePool"] = False
    r = det("job", "list")
    assert r.rc == 1
    assert r.err.startswith("Error: no default compute pool found")
    assert "--resource-pool" in r.err


def test_job_list_empty_queue(fake_master, det):
    fake_master.state.jobs = []
    r = det("job", "list")
    assert r.rc == 0, r.err
    assert table_rows(r.out) == []
    assert det("job", "list", "--json").out.strip() == "[]"


def test_job_list_shows_8_character_ids_and_json_the_full_ones(fake_master, det):
    long_ids = ["73853c5c-1111-4000-8000-000000000001", "0d714127-2222-4000-8000-000000000002"]
    for j, job_id in zip(fake_master.state.jobs, long_ids, strict=False):
        j["jobId"] = job_id
    r = det("job", "list")
    assert r.rc == 0, r.err
    assert [row[1] for row in table_rows(r.out)] == ["73853c5c", "0d714127", "job-3"]
    assert [j["jobId"] for j in json.loads(det("job", "list", "--json").out)] == [*long_ids, "job-3"]


def test_job_list_says_why_waiting_jobs_wait_under_the_table(fake_master, det):
    fake_master.state.jobs[1]["waitingReason"] = "waiting for 4 slots: resource pool 'default' has 0 free of 2 slots"
    fake_master.state.jobs[2]["waitingReason"] = ("no connected agent of resource pool 'default' offers the "
                                                  "environment 'tf'")
    r = det("job", "list")
    assert r.rc == 0, r.err
    table, _, waiting = r.out.partition("\n\nWaiting:\n")
    assert [row[1] for row in table_rows(table)] == ["job-1", "job-2", "job-3"]
    assert waiting.splitlines() == [
        "  job-2  waiting for 4 slots: resource pool 'default' has 0 free of 2 slots",
        "  job-3  no connected agent of resource pool 'default' offers the environment 'tf'"]
    assert json.loads(det("job", "list", "--json").out)[1]["waitingReason"].startswith("waiting for 4 slots")


def test_short_ids_grow_only_where_two_shown_ids_share_8_characters():
    from controlplane.cli.job import short_ids

    assert short_ids(["73853c5c-aaaa", "73853c5c-abbb", "0d714127-cccc", "x"]) == {
        "73853c5c-aaaa": "73853c5c-aa", "73853c5c-abbb": "73853c5c-ab", "0d714127-cccc": "0d714127-cc", "x": "x"}
    assert short_ids(["73853c5c-aaaa", "0d714127-cccc"]) == {"73853c5c-aaaa": "73853c5c", "0d714127-cccc": "0d714127"}
    assert short_ids([]) == {}


def test_job_rows_read_limited_jobs_and_unknown_position():
    from controlplane.cli import job

    assert job.unwrap_job({"limited": {"jobId": "x"}}) == {"jobId": "x"}
    rows = job.job_rows([{"jobId": "x", "type": "TYPE_COMMAND", "summary": {"state": "STATE_QUEUED",
                                                                            "jobsAhead": -1}}], False)
    assert rows == [["N/A", "x", "COMMAND", "", "", "", "0/0", "Queued", ""]]


# ---- update ---------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value,key,sent", [
    ("--priority", "7", "priority", 7),
    ("--resource-pool", "fair", "resourcePool", "fair"),
    ("--ahead-of", "job-1", "aheadOf", "job-1"),
    ("--behind-of", "job-3", "behindOf", "job-3"),
])
def test_job_update_sends_one_update_with_nulls(fake_master, det, flag, value, key, sent):
    r = det("job", "update", "job-2", flag, value)
    assert r.rc == 0, r.err
    assert queue_updates(fake_master) == [{"updates": [{"jobId": "job-2", **NULLS, key: sent}]}]
    assert r.out.startswith("Updated job job-2: ")


def test_job_update_weight_on_a_fair_share_job(fake_master, det):
    r = det("job", "update", "job-4", "--weight", "0.5")
    assert r.rc == 0, r.err
    assert queue_updates(fake_master) == [{"updates": [{"jobId": "job-4", **NULLS, "weight": 0.5}]}]
    assert r.out.strip() == "Updated job job-4: weight 0.5"
    assert fake_master.state.jobs[-1]["weight"] == 0.5


def test_job_update_moves_the_job_in_the_queue(fake_master, det):
    assert det("job", "update", "job-3", "--ahead-of", "job-1").rc == 0
    assert [row[1] for row in table_rows(det("job", "list").out)] == ["job-3", "job-1", "job-2"]


@pytest.mark.parametrize("args,message", [
    (["--priority", "0"], "priority must be an integer from 1 to 99, got '0'"),
    (["--priority", "100"], "priority must be an integer from 1 to 99, got '100'"),
    (["--priority", "high"], "priority must be an integer from 1 to 99, got 'high'"),
    (["--weight", "0"], "weight must be a number > 0, got '0'"),
    (["--weight", "-2"], "weight must be a number > 0, got '-2'"),
    (["--weight", "nan"], "weight must be a number > 0, got 'nan'"),
    (["--ahead-of", "job-2"], "a job cannot be moved relative to itself"),
])
def test_job_update_client_side_checks(fake_master, det, args, message):
    r = det("job", "update", "job-2", *args)
    assert r.rc == 1
    assert r.err.startswith("Error: ") and message in r.err
    assert queue_updates(fake_master) == []


def test_job_update_needs_exactly_one_change(fake_master, det):
    assert det("job", "update", "job-2").rc == 2
    assert det("job", "update", "job-2", "--priority", "5", "--weight", "2").rc == 2
    assert queue_updates(fake_master) == []


def test_job_update_master_rejection_is_one_error_line(fake_master, det):
    r = det("job", "update", "job-2", "--weight", "2")  # job-2 is in a priority pool
    assert r.rc == 1
    assert r.err.strip() == ("Error: updates[0].weight: weight applies only under the fair_share scheduler; "
                             "pool 'default' uses priority (set a priority instead)")
    assert "Traceback" not in r.err
    assert r.out == ""


def test_job_update_unknown_job(fake_master, det):
    r = det("job", "update", "job-99", "--priority", "5")
    assert r.rc == 1
    assert r.err.strip() == "Error: updates[0]: job 'job-99' not found"


# ---- update-batch ---------------------------------------------------------------------------
def test_update_batch_sends_every_operation_in_one_post_in_order(fake_master, det):
    r = det("job", "update-batch", "job-1.priority=5", "job-2.resource-pool=fair", "job-4.weight=3",
            "job-3.ahead-of=job-1", "job-1.behind_of=job-3", "job-2.resource_pool=default")
    assert r.rc == 0, r.err
    assert queue_updates(fake_master) == [{"updates": [
        {"jobId": "job-1", **NULLS, "priority": 5},
        {"jobId": "job-2", **NULLS, "resourcePool": "fair"},
        {"jobId": "job-4", **NULLS, "weight": 3.0},
        {"jobId": "job-3", **NULLS, "aheadOf": "job-1"},
        {"jobId": "job-1", **NULLS, "behindOf": "job-3"},
        {"jobId": "job-2", **NULLS, "resourcePool": "default"},
    ]}]
    assert r.out.splitlines() == ["Updated job job-1: priority 5", "Updated job job-2: resource pool fair",
                                  "Updated job job-4: weight 3", "Updated job job-3: ahead of job-1",
                                  "Updated job job-1: behind of job-3", "Updated job job-2: resource pool default"]


def test_update_batch_job_ids_may_contain_dots(fake_master, det):
    fake_master.state.jobs.append({**fake_master.state.jobs[0], "jobId": "a.b.c"})
    r = det("job", "update-batch", "a.b.c.priority=3")
    assert r.rc == 0, r.err
    assert queue_updates(fake_master) == [{"updates": [{"jobId": "a.b.c", **NULLS, "priority": 3}]}]


@pytest.mark.parametrize("bad,message", [
    ("job-2priority=5", "malformed operation 'job-2priority=5'"),
    ("job-2.priority", "malformed operation 'job-2.priority'"),
    ("job-2.prio=5", "unknown operation 'prio'"),
    (".priority=5", "the job id is empty"),
    ("job-2.priority=500", "priority must be an integer from 1 to 99, got '500'"),
    ("job-2.weight=-1", "weight must be a number > 0, got '-1'"),
    ("job-2.resource-pool=", "the value is empty"),
])
def test_update_batch_malformed_operation_sends_nothing(fake_master, det, bad, message):
    r = det("job", "update-batch", "job-1.priority=5", bad)
    assert r.rc == 1
    assert r.err.startswith("Error: ") and message in r.err
    assert repr(bad) in r.err  # the error names the operation
    assert queue_updates(fake_master) == []
    assert r.out == ""


def test_update_batch_master_rejection_changes_nothing_and_names_the_operation(fake_master, det):
    before = [dict(j) for j in fake_master.state.jobs]
    r = det("job", "update-batch", "job-1.priority=5", "job-2.weight=2", "job-3.priority=9")
    assert r.rc == 1
    assert len(queue_updates(fake_master)) == 1
    assert r.out == ""
    assert r.err.strip() == ("Error: operation 'job-2.weight=2': updates[1].weight: weight applies only under the "
                             "fair_share scheduler; pool 'default' uses priority (set a priority instead) "
                             "(nothing was changed)")
    assert "Traceback" not in r.err
    assert fake_master.state.jobs == before


def test_update_batch_needs_an_operation(fake_master, det):
    assert det("job", "update-batch").rc == 2
