"""OpenPAI job states, as its REST server names them (WAITING, RUNNING, SUCCEEDED, STOPPED, FAILED).

One job runs in attempts (``retryCount``); an attempt's tasks are placed together, so a job is
WAITING until its whole gang is placed and RUNNING once it is. A failed attempt with retries left
goes back to WAITING for the next one.
"""

from controlplane.state.machine import StateMachine

WAITING = "WAITING"
RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
STOPPED = "STOPPED"

PAI_JOB = StateMachine(
    "pai job",
    {
        WAITING: {
            RUNNING: "every task of the attempt was placed",
            FAILED: "its attempt failed before it ran and no retry is left",
            STOPPED: "stopped by a user before it was placed",
        },
        RUNNING: {
            SUCCEEDED: "the completion policy says the attempt succeeded",
            FAILED: "the completion policy says the attempt failed and no retry is left",
            WAITING: "the attempt failed and a retry is left",
            STOPPED: "stopped by a user",
        },
    },
    terminal={SUCCEEDED, FAILED, STOPPED},
)
