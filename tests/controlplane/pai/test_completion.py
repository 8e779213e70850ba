"""The frameworklauncher's ApplicationCompletionPolicy and the job's retryCount, as a table."""

from __future__ import annotations

import pytest

from controlplane.pai.completion import Decision, JobState, TaskState, decide, should_retry
from controlplane.pai.spec import parse_job
from tests.controlplane.pai.guide_example import example

P, R, S, F = TaskState.PENDING, TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED


def job(ps: dict | None = None, worker: dict | None = None, **top):
    raw = example()
    raw["taskRoles"][0].update(ps or {})
    raw["taskRoles"][1].update(worker or {})
    raw.update(top)
    return parse_job(raw)[0]


GUIDE = job()  # ps: minFailed 1 (default), minSucceeded null; worker: minSucceeded 2
DEFAULTS = job(worker={"minSucceededTaskCount": None})  # every role: fail on 1 failure, succeed when all done
NO_FAIL = job(ps={"minFailedTaskCount": None}, worker={"minFailedTaskCount": None, "minSucceededTaskCount": None})
MAPREDUCE = job(worker={"minFailedTaskCount": 2, "minSucceededTaskCount": None})
FIRST_DONE = job(worker={"minSucceededTaskCount": 1})

CASES = [
    # the guide's example: both workers exit 0 while the ps still run -> SUCCEEDED, ps to stop
    ("guide: workers done, ps running", GUIDE, [R, R], [S, S], JobState.SUCCEEDED,
     (("ps_server", 0), ("ps_server", 1))),
    ("guide: one worker done", GUIDE, [R, R], [S, R], JobState.RUNNING, ()),
    ("guide: a ps fails", GUIDE, [F, R], [S, R], JobState.FAILED, (("ps_server", 1), ("worker", 1))),
    ("guide: a worker fails", GUIDE, [R, R], [F, R], JobState.FAILED,
     (("ps_server", 0), ("ps_server", 1), ("worker", 1))),
    ("guide: ps exit 0 early does not finish it", GUIDE, [S, S], [R, R], JobState.RUNNING, ()),
    ("guide: still pending", GUIDE, [P, P], [P, P], JobState.RUNNING, ()),
    # defaults: any failure fails; success only when every task is done
    ("defaults: all succeeded", DEFAULTS, [S, S], [S, S], JobState.SUCCEEDED, ()),
    ("defaults: one left", DEFAULTS, [S, S], [S, R], JobState.RUNNING, ()),
    ("defaults: one failed", DEFAULTS, [S, F], [R, P], JobState.FAILED, (("worker", 0), ("worker", 1))),
    # minFailedTaskCount null everywhere: the job succeeds whatever fails, once all are done
    ("null: all failed", NO_FAIL, [F, F], [F, F], JobState.SUCCEEDED, ()),
    ("null: failures, one running", NO_FAIL, [F, F], [F, R], JobState.RUNNING, ()),
    # failures below the limit: SUCCEEDED once all are done (the launcher's note 4)
    ("mapreduce: one failure tolerated", MAPREDUCE, [S, S], [F, S], JobState.SUCCEEDED, ()),
    ("mapreduce: two failures", MAPREDUCE, [S, R], [F, F], JobState.FAILED, (("ps_server", 1),)),
    # first completed task dominates
    ("first done: one worker succeeded", FIRST_DONE, [R, R], [R, S], JobState.SUCCEEDED,
     (("ps_server", 0), ("ps_server", 1), ("worker", 0))),
    # both rules trip at once (a snapshot, not an event): FAILED, the safe choice
    ("both at once", GUIDE, [F, R], [S, S], JobState.FAILED, (("ps_server", 1),)),
]


@pytest.mark.parametrize("name, the_job, ps, worker, state, stop", CASES, ids=[c[0] for c in CASES])
def test_completion_policy(name, the_job, ps, worker, state, stop):
    decision = decide(the_job, {"ps_server": ps, "worker": worker})
    assert decision.state is state
    assert decision.stop == stop  # a running job stops nothing
    if state is JobState.RUNNING:
        assert decision == Decision(JobState.RUNNING, "")


def test_reasons_are_the_launchers():
    assert decide(GUIDE, {"ps_server": [R, R], "worker": [S, S]}).reason == \
        "[worker]: SucceededTaskCount 2 has reached MinSucceededTaskCount 2."
    assert decide(GUIDE, {"ps_server": [F, R], "worker": [R, R]}).reason == \
        "[ps_server]: FailedTaskCount 1 has reached MinFailedTaskCount 1."
    assert decide(NO_FAIL, {"ps_server": [F, S], "worker": [S, S]}).reason == (
        "All Tasks completed and no ApplicationCompletionPolicy has ever been triggered: "
        "TotalTaskCount: 4, FailedTaskCount: 1.")


def test_task_counts_must_match_the_job():
    with pytest.raises(ValueError, match="worker: 2 task states expected, got 1"):
        decide(GUIDE, {"ps_server": [R, R], "worker": [R]})


@pytest.mark.parametrize("retry_count, state, retried, expected", [
    (0, JobState.FAILED, 0, False),  # the default: never retried
    (2, JobState.FAILED, 0, True),
    (2, JobState.FAILED, 1, True),
    (2, JobState.FAILED, 2, False),  # retried while retriedCount < maxRetryCount
    (2, JobState.SUCCEEDED, 0, False),  # a success is never retried
])
def test_retry_count_retries_the_whole_job(retry_count, state, retried, expected):
    assert should_retry(job(retryCount=retry_count), state, retried) is expected


def test_a_running_attempt_cannot_be_retried():
    with pytest.raises(ValueError):
        should_retry(GUIDE, JobState.RUNNING, 0)
