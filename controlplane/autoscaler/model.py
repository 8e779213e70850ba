"""The autoscaler planner's inputs and outputs: plain frozen values, no database, no clock.

Times are seconds on one clock the caller chooses (the reconciler passes its `now`); durations
are seconds. Block keys (see `Blocked`) are built only by `keys.py` so the planner and
`on_launch_error` can never disagree about their spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from controlplane.state.instance import InstanceState

ErrorKind = Literal["no_capacity", "quota", "transient", "invalid_config", "fatal"]


@dataclass(frozen=True)
class PoolScaling:
    """One pool's scaling policy (Determined's provider fields, plus ordered failover lists).

    Every instance type listed must have `slots_per_instance` slots: the types are alternatives
    for the same agent shape, tried in order, not a mix of shapes. `zones=()` means the
    provider's default zone (spelled "" in launches and block keys).
    """

    pool: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...] = ()
    slots_per_instance: int = 1
    spot: bool = False
    spot_fallback_to_on_demand: bool = False
    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period_s: float = 600.0
    max_agent_starting_period_s: float = 600.0
    launch_cooldown_s: float = 300.0
    max_launch_per_tick: int | None = None  # None: max_instances

    def __post_init__(self) -> None:
        if not self.instance_types:
            raise ValueError(f"pool {self.pool!r}: at least one instance type is needed")
        if self.slots_per_instance < 1:
            raise ValueError(f"pool {self.pool!r}: slots_per_instance must be >= 1")
        if self.min_instances < 0 or self.max_instances < self.min_instances:
            raise ValueError(f"pool {self.pool!r}: need 0 <= min_instances <= max_instances")
        if self.max_idle_agent_period_s <= 0 or self.max_agent_starting_period_s <= 0:
            raise ValueError(f"pool {self.pool!r}: idle and starting periods must be > 0")
        if self.max_launch_per_tick is None:
            object.__setattr__(self, "max_launch_per_tick", self.max_instances)
        elif self.max_launch_per_tick < 1:
            raise ValueError(f"pool {self.pool!r}: max_launch_per_tick must be >= 1")

    @property
    def launch_limit(self) -> int:
        """`max_launch_per_tick` resolved (never None after construction)."""
        return self.max_launch_per_tick if self.max_launch_per_tick is not None else self.max_instances


@dataclass(frozen=True)
class InstanceView:
    """One instance as the cloud lists it this tick (found by the cluster's tags).

    `known`: the master's database has a launch record for it; an unknown tagged instance is a
    leak (a launch whose record was lost, or a previous master's) unless its launch request id
    matches a launch still in flight. `last_agent_seen_at`: when its agent was last connected
    (None: never); it lets an agent that dropped off be told apart from one that never came.
    """

    instance_id: str
    state: InstanceState
    launched_at: float
    zone: str = ""
    instance_type: str = ""
    spot: bool = False
    launch_request_id: str = ""
    known: bool = True
    last_agent_seen_at: float | None = None


@dataclass(frozen=True)
class AgentView:
    """A connected agent. For cloud agents `agent_id` is the instance id (EC2) or name (GCE)."""

    agent_id: str
    idle_since: float | None  # None: busy (any slotted or zero-slot container)
    slots: int


@dataclass(frozen=True)
class PendingLaunch:
    """A launch the reconciler issued that the cloud may not list yet (eventual consistency).

    Counted as coming capacity and against `max_instances` until instances carrying its
    `launch_request_id` are listed, or until `max_agent_starting_period_s` has passed.
    """

    launch_request_id: str
    count: int
    requested_at: float
    instance_type: str = ""
    zone: str = ""
    spot: bool = False


@dataclass(frozen=True)
class Demand:
    """Slot counts of pending gangs the scheduler could not place on current agents."""

    gangs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Blocked:
    """A launch option ruled out until `until`.

    Keys: "zone:<z>" (the whole zone, any type), "type:<t>" (on-demand quota for a type),
    "spot-type:<t>" (spot quota, a separate quota on EC2), "zone:<z>:<t>" (no on-demand capacity
    for a type in a zone), "spot:<z>:<t>" (no spot capacity for a type in a zone).
    `reason` starts with the error kind ("no capacity: ", "quota: ") then the provider's message.
    """

    key: str
    until: float
    reason: str


@dataclass(frozen=True)
class LaunchFailure:
    """Consecutive launch errors that are not capacity or quota (those block an option instead)."""

    consecutive_failures: int = 0
    last_error: str = ""
    next_attempt_at: float = 0.0


@dataclass(frozen=True)
class Launch:
    count: int
    instance_type: str
    zone: str  # "" = the provider's default zone
    spot: bool
    reason: str


@dataclass(frozen=True)
class Terminate:
    instance_id: str
    reason: str


Action = Launch | Terminate


@dataclass
class Decision:
    """What to do this tick, and a sentence for every action and for every reason not to act."""

    actions: list[Action] = field(default_factory=list)
    explanation: list[str] = field(default_factory=list)

    @property
    def launches(self) -> list[Launch]:
        return [a for a in self.actions if isinstance(a, Launch)]

    @property
    def terminations(self) -> list[Terminate]:
        return [a for a in self.actions if isinstance(a, Terminate)]
