"""The per-pool autoscaler's pure planner.

`plan()` turns (pool config, unplaceable demand from the scheduler, instances listed from the
cloud, agents, active blocks, launch-failure history, now) into launches, terminations and
consolidation drains, each with a human sentence; `on_launch_error()`/`on_launch_success()` fold
a launch's outcome back into the blocks and the backoff so the reconciler can call `plan()` again
in the same tick and reach the next zone or instance type at once. Nothing here does I/O or reads a clock.
"""

from controlplane.autoscaler.failures import on_launch_error, on_launch_success
from controlplane.autoscaler.model import (
    AgentView,
    Blocked,
    Consolidation,
    Decision,
    Demand,
    Drain,
    InstanceView,
    Launch,
    LaunchFailure,
    Move,
    PendingLaunch,
    PoolScaling,
    Shape,
    TaskView,
    Terminate,
)
from controlplane.autoscaler.planner import plan

__all__ = [
    "AgentView", "Blocked", "Consolidation", "Decision", "Demand", "Drain", "InstanceView", "Launch",
    "LaunchFailure", "Move", "PendingLaunch", "PoolScaling", "Shape", "TaskView", "Terminate", "on_launch_error",
    "on_launch_success", "plan",
]
