"""Experiment states (names as in Determined's experimentv1State, without the STATE_ prefix)."""

from controlplane.state.machine import StateMachine

ACTIVE = "ACTIVE"
PAUSED = "PAUSED"
STOPPING_KILLED = "STOPPING_KILLED"
STOPPING_CANCELED = "STOPPING_CANCELED"
STOPPING_COMPLETED = "STOPPING_COMPLETED"
STOPPING_ERROR = "STOPPING_ERROR"
COMPLETED = "COMPLETED"
CANCELED = "CANCELED"
ERROR = "ERROR"
# `det experiment delete`: its checkpoints' files are deleted, then its rows; a failure is kept.
DELETING = "DELETING"
DELETE_FAILED = "DELETE_FAILED"

EXPERIMENT = StateMachine(
    "experiment",
    {
        ACTIVE: {
            PAUSED: "a user paused it: its trials checkpoint and stop",
            STOPPING_KILLED: "a user killed it while trials run",
            STOPPING_CANCELED: "a user canceled it: its trials checkpoint and stop",
            STOPPING_COMPLETED: "the searcher is done; the last trials are finishing",
            STOPPING_ERROR: "a trial failed past max_restarts; the others are stopping",
            COMPLETED: "the searcher is done and every trial is terminal",
            CANCELED: "killed with no trial running, or every trial was canceled by a user",
            ERROR: "failed with no trial running",
        },
        PAUSED: {
            ACTIVE: "a user activated it",
            STOPPING_KILLED: "killed while trials were still winding down",
            STOPPING_CANCELED: "canceled while paused (trials still winding down stop as they do)",
            CANCELED: "killed while paused",
        },
        STOPPING_KILLED: {CANCELED: "every trial has stopped"},
        STOPPING_CANCELED: {CANCELED: "every trial has checkpointed and stopped",
                            STOPPING_KILLED: "killed while its trials were stopping"},
        STOPPING_COMPLETED: {
            COMPLETED: "every trial has finished",
            CANCELED: "every trial was canceled by a user",
            STOPPING_KILLED: "killed while the last trials finished",
            STOPPING_ERROR: "a finishing trial failed past max_restarts",
            ERROR: "a finishing trial failed past max_restarts and nothing else runs",
        },
        STOPPING_ERROR: {ERROR: "every trial has stopped", STOPPING_KILLED: "killed while stopping"},
        # Out of an end, only by a user's request (Determined's ContinueExperiment and DeleteExperiment).
        COMPLETED: {ACTIVE: "a user continued it: its unfinished trials run again",
                    DELETING: "a user deleted it"},
        CANCELED: {ACTIVE: "a user continued it: its unfinished trials run again",
                   DELETING: "a user deleted it"},
        ERROR: {ACTIVE: "a user continued it: its unfinished trials run again",
                DELETING: "a user deleted it"},
        DELETING: {DELETE_FAILED: "some of its checkpoints' files could not be deleted (kept, retried)"},
        DELETE_FAILED: {DELETING: "a user deleted it again"},
    },
    terminal={COMPLETED, CANCELED, ERROR, DELETING, DELETE_FAILED},
    reopened_to={ACTIVE, DELETING, DELETE_FAILED},
)
