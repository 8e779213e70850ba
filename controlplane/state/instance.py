"""A cloud instance's state as every provisioner reports it (each maps its cloud's own names onto these)."""

from typing import Final, Literal

InstanceState = Literal["pending", "running", "stopping", "stopped", "terminated"]

PENDING: Final = "pending"
RUNNING: Final = "running"
STOPPING: Final = "stopping"
STOPPED: Final = "stopped"  # still there (and billed for its disks), not running
TERMINATED: Final = "terminated"
# The master's record only, never a cloud's: a launch asked for (written before the call) that the
# cloud has not listed yet; the reconciler waits for it up to max_agent_starting_period.
REQUESTED: Final = "requested"

ALL: Final[tuple[InstanceState, ...]] = (PENDING, RUNNING, STOPPING, STOPPED, TERMINATED)
