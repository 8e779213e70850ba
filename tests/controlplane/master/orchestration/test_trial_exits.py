"""What a trial becomes when its allocation ends (trial_exits.decide), case by case as a user sees it."""

from __future__ import annotations

import pytest

from controlplane.master.orchestration.trial_exits import AllocationEnd, Finish, Requeue, decide
from controlplane.state import trial as T

EXITED_0 = AllocationEnd(0, "", "agent-1")
CHECKPOINTED = AllocationEnd(0, "", "agent-1", preempt_acked=True)
CRASHED = AllocationEnd(1, "", "agent-1")
KILLED_AT_DEADLINE = AllocationEnd(137, "", "agent-1", killed_for_preemption=True)
AGENT_LOST = AllocationEnd(None, "agent lost", "agent-2", agent_lost=True)


@pytest.mark.parametrize("state,end,expected", [
    # A running trial that finishes, or is preempted (it checkpointed, or ignored it and was killed).
    (T.RUNNING, EXITED_0, Finish(T.COMPLETED, "its process exited 0", "completed", ran=True)),
    (T.RUNNING, CHECKPOINTED, Requeue("preempted", "preempted; resumes from its checkpoint")),
    (T.RUNNING, KILLED_AT_DEADLINE, Requeue("preempted", "preempted; resumes from its checkpoint")),
    (T.RUNNING, AGENT_LOST, Requeue("agent lost", "agent agent-2 lost; resumes from its checkpoint")),
    # Stopping on a user's or the searcher's word.
    (T.STOPPING_KILLED, CRASHED, Finish(T.CANCELED, "its process stopped after a kill", "canceled")),
    (T.STOPPING_COMPLETED, CHECKPOINTED, Finish(T.COMPLETED, "stopped early by the searcher", "completed")),
    (T.STOPPING_CANCELED, CHECKPOINTED,
     Finish(T.CANCELED, "its experiment was canceled: checkpointed and stopped", "canceled")),
    (T.STOPPING_CANCELED, KILLED_AT_DEADLINE,
     Finish(T.CANCELED, "its experiment was canceled: killed after ignoring its preemption", "canceled")),
    (T.STOPPING_CANCELED, EXITED_0, Finish(T.COMPLETED, "finished its work before it saw the cancel", "completed")),
    # Paused: it stays paused (the experiment is), unless it had finished its work anyway.
    (T.PAUSED, CHECKPOINTED, None),
    (T.PAUSED, EXITED_0, Finish(T.COMPLETED, "finished before it saw the pause", "completed")),
])
def test_how_it_ended_decides_what_the_trial_becomes(state, end, expected):
    assert decide(state, state != T.PAUSED, end, restarts=0, max_restarts=5) == expected


def test_a_paused_trial_of_an_experiment_active_again_goes_back_to_the_queue():
    assert decide(T.PAUSED, True, CHECKPOINTED, 0, 5) == Requeue("resumed after pause", "experiment active again")


def test_failures_restart_until_max_restarts_then_the_trial_errors_without_counting_the_last():
    assert decide(T.RUNNING, True, CRASHED, restarts=4, max_restarts=5) == Requeue(
        "restart after exit code 1", "exit code 1; restart 5 of 5", restart=True)
    assert decide(T.RUNNING, True, CRASHED, restarts=5, max_restarts=5) == Finish(
        T.ERROR, "exit code 1; failed 6 times (max_restarts 5)", "errored", ran=True)


def test_a_failed_setup_errors_at_once_with_its_reason():
    end = AllocationEnd(1, "pip install failed", "agent-1", setup_failed=True)
    decision = decide(T.QUEUED, True, end, restarts=0, max_restarts=5)
    assert isinstance(decision, Finish) and decision.state == T.ERROR and decision.ran
    assert decision.why.startswith("pip install failed; its setup failed before the entrypoint ran")


def test_a_trial_already_ended_is_left_alone():
    assert decide(T.COMPLETED, True, CRASHED, 0, 5) is None
