"""Trial states. QUEUED and RUNNING are stored, so the API's trialv1State needs no derivation."""

from controlplane.state.machine import StateMachine

QUEUED = "QUEUED"
RUNNING = "RUNNING"
PAUSED = "PAUSED"
STOPPING_KILLED = "STOPPING_KILLED"
STOPPING_COMPLETED = "STOPPING_COMPLETED"
STOPPING_CANCELED = "STOPPING_CANCELED"
COMPLETED = "COMPLETED"
CANCELED = "CANCELED"
ERROR = "ERROR"

TRIAL = StateMachine(
    "trial",
    {
        QUEUED: {
            RUNNING: "its allocation started on an agent",
            PAUSED: "the experiment was paused before it ran",
            CANCELED: "killed or canceled, or stopped by the searcher, before it ran",
            STOPPING_CANCELED: "its experiment was canceled while it was being placed: it stops",
            STOPPING_KILLED: "killed after its start was sent, before the agent said it started: it is stopped",
            ERROR: "its allocation could not start past max_restarts",
        },
        RUNNING: {
            QUEUED: "it exited early (failure within max_restarts, agent lost, preempted) and waits to resume",
            PAUSED: "the experiment was paused: it checkpoints and exits",
            STOPPING_KILLED: "killed: its process is being stopped",
            STOPPING_CANCELED: "its experiment was canceled: it checkpoints and exits",
            STOPPING_COMPLETED: "the searcher stopped it: it checkpoints and exits",
            COMPLETED: "its process exited 0",
            ERROR: "it failed more than max_restarts times",
        },
        PAUSED: {
            QUEUED: "the experiment was activated",
            RUNNING: "the experiment was activated while its process still wound down from the pause",
            CANCELED: "killed or canceled while paused",
            STOPPING_KILLED: "killed while its process was still winding down",
            STOPPING_CANCELED: "canceled while its process was still winding down",
            COMPLETED: "its process finished its work before it saw the pause",
        },
        STOPPING_KILLED: {CANCELED: "its process has exited"},
        STOPPING_CANCELED: {CANCELED: "its process has checkpointed and exited (or ended otherwise)",
                            COMPLETED: "its process finished its work before it saw the cancel",
                            STOPPING_KILLED: "killed while stopping"},
        STOPPING_COMPLETED: {COMPLETED: "its process has exited", STOPPING_KILLED: "killed while stopping"},
        # Out of an end, only by a user continuing its experiment (Determined's ContinueExperiment).
        COMPLETED: {QUEUED: "its experiment was continued: it resumes from its latest checkpoint"},
        CANCELED: {QUEUED: "its experiment was continued: it resumes from its latest checkpoint"},
        ERROR: {QUEUED: "its experiment was continued: it resumes from its latest checkpoint"},
    },
    terminal={COMPLETED, CANCELED, ERROR},
    reopened_to={QUEUED},
)
