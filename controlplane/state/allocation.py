"""Allocation states: one attempt to run a task on an agent."""

from controlplane.state.machine import StateMachine

PENDING = "PENDING"
ASSIGNED = "ASSIGNED"
RUNNING = "RUNNING"
TERMINATED = "TERMINATED"

ALLOCATION = StateMachine(
    "allocation",
    {
        PENDING: {
            ASSIGNED: "the scheduler placed it and the start message was sent",
            TERMINATED: "its trial was stopped before it was placed",
        },
        ASSIGNED: {
            RUNNING: "the agent started its process",
            TERMINATED: "the agent could not start it, or was lost",
        },
        RUNNING: {TERMINATED: "its process exited, or its agent was lost"},
    },
    terminal={TERMINATED},
)
