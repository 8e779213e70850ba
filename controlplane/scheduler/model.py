"""The planner's inputs and outputs: plain frozen values, no database, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.scheduler.environment import DEFAULT, DEFAULT_IMAGE, Image

DEFAULT_PRIORITY = 42  # Determined's default; 1..99, lower runs first


@dataclass(frozen=True)
class PoolPolicy:
    name: str
    scheduler: str = "priority"  # "priority" | "fair_share"
    preemption: bool = True
    default_priority: int = DEFAULT_PRIORITY
    fitting_policy: str = "best"  # "best" | "worst"
    max_zero_slot_per_agent: int = 100


@dataclass(frozen=True)
class Request:
    """A PENDING allocation.

    Usually one gang of ``slots_needed`` slots. With ``tasks`` it is a task group (an OpenPAI
    job: task roles, each with several tasks): one task per entry, the entry being that task's
    slot count (>= 0; 0 for a CPU-only task), and ``slots_needed`` their sum (the caller sets
    it). ``allocation_id`` names the whole group. A group is placed all at once or not at all
    (its parameter servers and workers must meet); each task on one agent, several tasks may
    share an agent (Capacity.find_group). A group never preempts running work: it waits, and
    as the head of a priority queue it holds the agents it could use (priority.py).
    ``max_slots`` applies to its sum as to any request.
    """

    allocation_id: str
    job_id: str
    pool: str
    slots_needed: int
    priority: int = DEFAULT_PRIORITY  # 1..99, lower runs first
    weight: float = 1.0
    max_slots: int | None = None  # for the whole job
    queue_position: float = 0.0
    submitted_at: float = 0.0
    preemptible: bool = True
    # The environment it runs in (environment.image): only agents offering it can take it.
    image: Image = DEFAULT_IMAGE
    # Non-empty: a task group, one entry per task (its slot count); see the class docstring.
    tasks: tuple[int, ...] = ()
    # A group's tasks' other needs, in the order of ``tasks`` (empty: none): the CPUs each books on
    # its agent (an OpenPAI role's cpuNumber), and the fixed ports each must get on its agent's host
    # (a portList's beginAt ranges). Only agents with those CPUs free, on a host where those ports
    # are free, take the task (booking.py).
    task_cpus: tuple[int, ...] = ()
    task_ports: tuple[frozenset[int], ...] = ()

    @property
    def books(self) -> bool:
        """Whether its tasks need CPUs or fixed ports besides slots."""
        return any(self.task_cpus) or any(self.task_ports)


@dataclass(frozen=True)
class Running:
    """An allocation holding slots now."""

    allocation_id: str
    job_id: str
    pool: str
    resources: tuple[tuple[str, tuple[int, ...]], ...]  # (agent, slots) per rank; () for zero-slot
    priority: int = DEFAULT_PRIORITY
    weight: float = 1.0
    started_at: float = 0.0
    preemptible: bool = True
    preempting: bool = False
    zero_slot_agent: str | None = None
    # Its job's place in the queue (as Request's): at equal priority, work behind a waiting
    # request in the queue may be preempted for it.
    queue_position: float = 0.0
    submitted_at: float = 0.0


@dataclass(frozen=True)
class AgentSnapshot:
    agent_id: str
    pool: str
    slot_ids: tuple[int, ...]
    used_slot_ids: frozenset[int]
    schedulable: bool = True
    zero_slot_tasks: int = 0
    environments: frozenset[str] = frozenset({DEFAULT})  # what it offers (every agent: default)
    slot_type: str = "cpu"  # its slots' device type: picks from an image map
    gpu_models: frozenset[str] = frozenset()  # its slots' brands, lower-cased (an OpenPAI job's gpuType)
    cpus: int = 0  # its CPUs (Register.cpus); 0: not reported, so CPU needs are not checked on it
    used_cpus: int = 0  # CPUs booked by the tasks running on it (Request.task_cpus)
    host: str = ""  # the address its tasks listen on: agents of one host share its ports ("": its own)
    used_ports: frozenset[int] = frozenset()  # ports live work holds on its host

    def offers(self, image: Image) -> bool:
        return image.for_slot_type(self.slot_type) in self.environments and image.fits_gpus(self.gpu_models)


@dataclass(frozen=True)
class Placement:
    """Where a request goes. ``resources``: for a gang, one (agent, slot ids) entry per agent,
    rank = index; for a task group (``Request.tasks``), one entry per task in the order of
    ``tasks`` (agents may repeat, a zero-slot task has slot ids ``()``); no slot appears twice."""

    allocation_id: str
    resources: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Preemption:
    allocation_id: str
    reason: str


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    # Why a request that is not placed waits (allocation id -> a short sentence): every pending
    # request of a known pool that got no placement (waiting.py).
    waiting: dict[str, str] = field(default_factory=dict)
