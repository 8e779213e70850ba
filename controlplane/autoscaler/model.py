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
class Shape:
    """One instance type a pool may launch: its slots, GPU model and prices ($/h; 0 = unknown)."""

    instance_type: str
    slots: int
    usd_per_hour: float = 0.0  # on demand
    spot_usd_per_hour: float = 0.0
    gpu_model: str = ""

    def price(self, spot: bool) -> float:
        """What an hour costs in that market (spot falls back to on-demand when unknown)."""
        return (self.spot_usd_per_hour or self.usd_per_hour) if spot else self.usd_per_hour


@dataclass(frozen=True)
class Consolidation:
    """When the autoscaler may empty an underused instance by moving its trials elsewhere.

    A trial is moved only when it can resume (it checkpointed on a preemption before, or its
    experiment declares it honours preemption), at most `max_moves_per_trial` times, and only
    when what terminating its instance saves over the trials' expected remaining time beats
    `move_cost_s` of each moved trial's slots (the work since its last checkpoint, the restart).
    Onto other instances' free slots only trials that have run `min_runtime_s`: younger work
    mostly ends by itself, and new work soon refills the slots a move would fill, so a move
    spent on it buys nothing and uses up the trial's moves (see consolidation.py).
    """

    enabled: bool = True
    max_moves_per_trial: int = 2
    move_cost_s: float = 120.0
    min_runtime_s: float = 3 * 3600.0


@dataclass(frozen=True)
class PoolScaling:
    """One pool's scaling policy (Determined's provider fields, plus ordered failover lists).

    `shapes` are the instance types the pool may launch, each with its slots and prices; types
    with the same slot count are alternatives for one agent shape (tried cheapest first, then in
    order), types with different slot counts are a mix the planner chooses from per launch. A
    pool given only `instance_types` has one shape of `slots_per_instance` slots, exactly as
    Determined's single `instance_type`. `zones=()` means the provider's default zone (spelled
    "" in launches and block keys).
    """

    pool: str
    instance_types: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    slots_per_instance: int = 1  # with mixed shapes: the largest shape's slots
    shapes: tuple[Shape, ...] = ()
    consolidation: Consolidation = field(default_factory=Consolidation)
    spot: bool = False
    spot_fallback_to_on_demand: bool = False
    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period_s: float = 600.0
    max_agent_starting_period_s: float = 600.0
    launch_cooldown_s: float = 300.0
    max_launch_per_tick: int | None = None  # None: max_instances

    def __post_init__(self) -> None:
        if self.shapes:
            if any(s.slots < 1 for s in self.shapes):
                raise ValueError(f"pool {self.pool!r}: every shape needs >= 1 slot")
            object.__setattr__(self, "instance_types", tuple(s.instance_type for s in self.shapes))
            object.__setattr__(self, "slots_per_instance", max(s.slots for s in self.shapes))
        elif self.instance_types:
            object.__setattr__(self, "shapes", tuple(Shape(t, self.slots_per_instance) for t in self.instance_types))
        if not self.instance_types:
            raise ValueError(f"pool {self.pool!r}: at least one instance type is needed")
        if self.slots_per_instance < 1:
            raise ValueError(f"pool {self.pool!r}: slots_per_instance must be >= 1")
        c = self.consolidation
        if c.max_moves_per_trial < 0 or c.move_cost_s < 0 or c.min_runtime_s < 0:
            raise ValueError(f"pool {self.pool!r}: consolidation needs max_moves_per_trial, move_cost and "
                             "min_runtime >= 0")
        if self.min_instances < 0 or self.max_instances < self.min_instances:
            raise ValueError(f"pool {self.pool!r}: need 0 <= min_instances <= max_instances")
        if self.max_idle_agent_period_s <= 0 or self.max_agent_starting_period_s <= 0:
            raise ValueError(f"pool {self.pool!r}: idle and starting periods must be > 0")
        if self.max_launch_per_tick is None:
            object.__setattr__(self, "max_launch_per_tick", self.max_instances)
        elif self.max_launch_per_tick < 1:
            raise ValueError(f"pool {self.pool!r}: max_launch_per_tick must be >= 1")

    def shape_of(self, instance_type: str) -> Shape | None:
        return next((s for s in self.shapes if s.instance_type == instance_type), None)

    def slots_of(self, instance_type: str) -> int:
        """Slots of an instance of that type (an unknown type, e.g. one adopted: the largest shape's)."""
        shape = self.shape_of(instance_type)
        return shape.slots if shape is not None else self.slots_per_instance

    def price_of(self, instance_type: str, spot: bool) -> float:
        """$/h of an instance of that type in that market (0: a type the pool does not list, or unpriced)."""
        shape = self.shape_of(instance_type)
        return shape.price(spot) if shape is not None else 0.0

    @property
    def mixed(self) -> bool:
        return len({s.slots for s in self.shapes}) > 1

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
class TaskView:
    """Work running on an agent, as consolidation sees it.

    `movable`: a trial that can resume elsewhere (it checkpointed on a preemption before, or its
    experiment says it honours preemption); commands, shells, notebooks, TensorBoards and
    OpenPAI tasks never are. `progress` in (0, 1) when known lets its remaining time be
    estimated from its age; otherwise its age is the estimate (long-running work tends to keep
    running).
    """

    task_id: str
    slots: int
    started_at: float
    movable: bool = False
    moves: int = 0  # times consolidation has moved it already
    progress: float = 0.0
    spans_agents: bool = False  # a gang over several agents is never moved by consolidation

    def expected_remaining_s(self, now: float) -> float:
        age = max(0.0, now - self.started_at)
        if 0.0 < self.progress < 1.0:
            return age * (1.0 - self.progress) / self.progress
        return age


@dataclass(frozen=True)
class AgentView:
    """A connected agent. For cloud agents `agent_id` is the instance id (EC2) or name (GCE).

    `free`: slots not running anything (None: all of them when idle, none when busy, for
    callers that do not know); `draining`: takes no new work (consolidation, spot notice,
    `det agent disable`); `tasks`: what runs on it, for consolidation."""

    agent_id: str
    idle_since: float | None  # None: busy (any slotted or zero-slot container)
    slots: int
    free: int | None = None
    draining: bool = False
    consolidating: bool = False  # drained by consolidation: terminated as soon as it is empty
    tasks: tuple[TaskView, ...] = ()

    @property
    def free_slots(self) -> int:
        if self.free is not None:
            return self.free
        return self.slots if self.idle_since is not None else 0


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


@dataclass(frozen=True)
class Move:
    """One trial consolidation moves off an instance, and where the planner expects it to go:
    another agent's free slots, or (`to_agent` "") a new instance of type `to_type`."""

    task_id: str
    slots: int
    to_agent: str
    to_type: str = ""


@dataclass(frozen=True)
class Drain:
    """Empty `instance_id` so it can be terminated: preempt `moves` (they checkpoint and are
    re-placed on other instances' free slots); the instance takes no new work meanwhile."""

    instance_id: str
    moves: tuple[Move, ...]
    reason: str
    usd_per_hour: float  # what terminating it saves every hour
    expected_saving_usd: float  # over the moved work's expected remaining time, less the moves' cost


Action = Launch | Terminate | Drain


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

    @property
    def drains(self) -> list[Drain]:
        return [a for a in self.actions if isinstance(a, Drain)]
