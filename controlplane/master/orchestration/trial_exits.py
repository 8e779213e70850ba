"""What a trial becomes when its allocation ends: a pure decision, carried out by the orchestrator.

From the trial's state (what it was asked to do: stop after a kill, a cancel, the searcher's stop,
a pause, or nothing), whether its experiment is active, how its process ended (exit code, whether
it acknowledged a preemption or was killed for ignoring one, its agent lost, its setup failed) and
its restarts so far, ``decide`` says whether it ends (``Finish``: its final state, why, and the
outcome the searcher hears), goes back to the queue (``Requeue``) or stays as it is (``None``: a
paused trial of a paused experiment).
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.state import trial as T


@dataclass(frozen=True)
class AllocationEnd:
    """How the trial's allocation ended."""

    exit_code: int | None
    reason: str  # the agent's or the master's words for it ("" when it only exited)
    agent_id: str | None
    agent_lost: bool = False
    setup_failed: bool = False  # its requirements or startup hook failed before the entrypoint
    preempt_acked: bool = False  # it acknowledged a preemption (checkpointed, then exited)
    killed_for_preemption: bool = False  # killed past its preemption timeout


@dataclass(frozen=True)
class Finish:
    state: str  # T.COMPLETED, T.CANCELED or T.ERROR
    why: str
    outcome: str  # what the searcher hears: completed, canceled or errored
    # The allocation ran its process: a trial still QUEUED (its start never seen) passes through RUNNING.
    ran: bool = False


@dataclass(frozen=True)
class Requeue:
    queue_reason: str  # the new allocation's reason
    why: str  # why the trial goes (back) to QUEUED, where it is not QUEUED already
    restart: bool = False  # a failure: counts one of max_restarts


def decide(trial_state: str, experiment_active: bool, end: AllocationEnd, restarts: int,
           max_restarts: int) -> Finish | Requeue | None:
    if trial_state == T.STOPPING_KILLED:
        return Finish(T.CANCELED, "its process stopped after a kill", "canceled")
    if trial_state == T.STOPPING_COMPLETED:
        return Finish(T.COMPLETED, "stopped early by the searcher", "completed")
    if trial_state == T.STOPPING_CANCELED:
        if end.exit_code == 0 and not (end.preempt_acked or end.killed_for_preemption or end.agent_lost):
            return Finish(T.COMPLETED, "finished its work before it saw the cancel", "completed")
        why = ("killed after ignoring its preemption" if end.killed_for_preemption
               else "checkpointed and stopped" if end.exit_code == 0 else f"stopped ({end.reason or 'exited'})")
        return Finish(T.CANCELED, f"its experiment was canceled: {why}", "canceled")
    if trial_state == T.PAUSED:
        if end.exit_code == 0 and not (end.preempt_acked or end.agent_lost):
            return Finish(T.COMPLETED, "finished before it saw the pause", "completed")
        # Activated again while it was winding down (a trial activated with its process running
        # reads RUNNING, so this is the rest: a pause that came back before that process started).
        return Requeue("resumed after pause", "experiment active again") if experiment_active else None
    if trial_state not in (T.RUNNING, T.QUEUED):
        return None
    if end.agent_lost:
        return Requeue("agent lost", f"agent {end.agent_id} lost; resumes from its checkpoint")
    if (end.exit_code == 0 and end.preempt_acked) or end.killed_for_preemption:
        return Requeue("preempted", "preempted; resumes from its checkpoint")
    if end.exit_code == 0:
        return Finish(T.COMPLETED, "its process exited 0", "completed", ran=True)
    why = f"exit code {end.exit_code}" if end.exit_code is not None else (end.reason or "failed to start")
    if end.setup_failed:  # a restart would fail the same way
        return Finish(T.ERROR, f"{end.reason or why}; its setup failed before the entrypoint ran, so it is not "
                               "restarted", "errored", ran=True)
    # `restarts` counts restarts made, as Determined shows it: the failure that ends the trial is
    # not one, so it stays at max_restarts.
    if restarts >= max_restarts:
        return Finish(T.ERROR, f"{why}; failed {restarts + 1} times (max_restarts {max_restarts})", "errored",
                      ran=True)
    return Requeue(f"restart after {why}", f"{why}; restart {restarts + 1} of {max_restarts}", restart=True)
