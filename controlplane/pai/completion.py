"""When a PAI job attempt ends, how, which tasks to stop, and whether to retry it.

Source: microsoft/pai at 0db059b215d497ca09fd9974cd7bc668f7090b5c, the frameworklauncher:
- ``.../common/model/TaskRoleApplicationCompletionPolicyDescriptor.java`` and
  ``.../applicationmaster/ApplicationMaster.java`` (``attemptToStop``): per role, once its failed
  tasks reach ``minFailedTaskCount`` (default 1, null: never) the attempt completes FAILED at once;
  once its succeeded tasks reach ``minSucceededTaskCount`` (default null: never) it completes
  SUCCEEDED at once; "regardless of any uncompleted Task", which are stopped. If no rule trips
  before every task is done, the attempt SUCCEEDED, whatever failures it had below the limits
  (the launcher's note 4: "the ExitStatus is succeeded").
- ``.../common/model/RetryPolicyDescriptor.java`` and ``.../service/Service.java``
  (``attemptToRetry``): the job's ``retryCount`` is the framework's ``maxRetryCount``; a failed
  attempt is retried while ``retriedCount < maxRetryCount``; a succeeded one never is.

Simplifications: the launcher decides on each task's exit in turn, and when rules of several
roles trip "at the same time the behavior can be any one"; from a snapshot we pick FAILED, the safe
one. The rest-server's ``fancyRetryPolicy`` (retry transient failures without counting them) needs
the launcher's exit-type classification, which this cluster does not have: every failure counts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.pai.spec import PaiJob

TaskKey = tuple[str, int]


class TaskState(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class JobState(enum.Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


FINAL = (TaskState.SUCCEEDED, TaskState.FAILED)


@dataclass(frozen=True)
class Decision:
    state: JobState
    reason: str
    stop: tuple[TaskKey, ...] = ()  # tasks still pending or running, to be stopped


def decide(job: PaiJob, tasks: Mapping[str, Sequence[TaskState]]) -> Decision:
    """The attempt's state from each role's task states (indexed by task index)."""
    for role in job.task_roles:
        states = tasks.get(role.name, ())
        if len(states) != role.task_number:
            raise ValueError(f"{role.name}: {role.task_number} task states expected, got {len(states)}")
    stop = tuple((r.name, i) for r in job.task_roles for i, s in enumerate(tasks[r.name]) if s not in FINAL)
    for role in job.task_roles:
        failed = sum(s is TaskState.FAILED for s in tasks[role.name])
        if role.min_failed_task_count is not None and failed >= role.min_failed_task_count:
            return Decision(JobState.FAILED, f"[{role.name}]: FailedTaskCount {failed} has reached "
                                             f"MinFailedTaskCount {role.min_failed_task_count}.", stop)
    for role in job.task_roles:
        succeeded = sum(s is TaskState.SUCCEEDED for s in tasks[role.name])
        if role.min_succeeded_task_count is not None and succeeded >= role.min_succeeded_task_count:
            return Decision(JobState.SUCCEEDED, f"[{role.name}]: SucceededTaskCount {succeeded} has reached "
                                                f"MinSucceededTaskCount {role.min_succeeded_task_count}.", stop)
    if not stop:
        failed = sum(s is TaskState.FAILED for states in tasks.values() for s in states)
        return Decision(JobState.SUCCEEDED, "All Tasks completed and no ApplicationCompletionPolicy has ever "
                                            f"been triggered: TotalTaskCount: {job.total_tasks}, "
                                            f"FailedTaskCount: {failed}.")
    return Decision(JobState.RUNNING, "")


def should_retry(job: PaiJob, attempt_state: JobState, retried_count: int) -> bool:
    """Whether an ended attempt is followed by another; ``retried_count``: retries made so far."""
    if attempt_state is JobState.RUNNING:
        raise ValueError("the attempt has not ended")
    return attempt_state is JobState.FAILED and retried_count < job.retry_count
