"""Whether an OpenPAI job could ever be placed in its pool: checked at submit, so a job that would wait
forever is refused with every reason at once, each naming its field by the guide's path.

Pure: the pool is given as the planner sees it (``AgentSnapshot``s of its agents, all idle; for an
autoscaled pool, its connected agents plus the instances it may launch) with the agents' port range.
A job is refused when

- a ``portList`` entry's fixed range (``beginAt`` .. ``beginAt + portNumber - 1``) lies outside the
  agents' range: no agent would ever give it those ports;
- tasks wanting the same fixed port (one role's tasks, or two roles whose ranges overlap) are more
  than the pool's hosts: two of them would have to share a host (not checked where the pool grows);
- a role's ``gpuNumber`` is more slots than any agent (or instance shape) has;
- a role's ``cpuNumber`` is more CPUs than any agent has (judged only when every agent reported its
  CPUs and the pool does not grow: a new instance's CPUs are not known);
- or, each role fitting alone, the tasks do not all fit at once: gang.py's message for slots, and
  the same packing with CPUs and ports (scheduler/booking.py) as the planner runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.config.errors import ConfigError
from controlplane.pai.spec import PaiJob, PortType, TaskRole
from controlplane.scheduler import booking as bk
from controlplane.scheduler.gang import group_shape_error
from controlplane.scheduler.model import AgentSnapshot
from controlplane.scheduler.waiting import port_ranges


@dataclass(frozen=True)
class Pool:
    name: str
    agents: Sequence[AgentSnapshot]  # every agent it has or may launch, as if idle
    port_low: int  # the agents' port range for jobs, inclusive
    port_high: int
    grows: bool = False  # an autoscaled pool: new instances bring new hosts, of CPUs not known
    books_cpus: bool = True  # the job's tasks book their cpuNumber (an OpenPAI job; not a command)


def port_set(p: PortType) -> frozenset[int]:
    """The fixed ports of a port type (none for ``beginAt`` 0: any free port)."""
    return frozenset(range(p.begin_at, p.begin_at + p.port_number)) if p.begin_at else frozenset()


def fixed_ports(role: TaskRole) -> frozenset[int]:
    """The fixed ports each task of the role wants."""
    return frozenset().union(*(port_set(p) for p in role.ports))


def problems(job: PaiJob, pool: Pool) -> list[ConfigError]:
    """Every reason the job could never be placed in the pool; [] when it could (or the pool has no
    agents to judge by: then only the port range is checked)."""
    out: list[ConfigError] = []
    for i, role in enumerate(job.task_roles):
        for j, p in enumerate(role.port_list):
            last = p.begin_at + p.port_number - 1
            if p.begin_at and (p.begin_at < pool.port_low or last > pool.port_high):
                out.append(ConfigError(
                    f"taskRoles[{i}].portList[{j}].beginAt",
                    f"ports {port_ranges(frozenset(range(p.begin_at, last + 1)))} ({p.label}) lie outside the agents' "
                    f"port range {pool.port_low}-{pool.port_high}: no agent can give them"))
    agents = list(pool.agents)
    if not agents:
        return out
    hosts = {a.host or a.agent_id for a in agents}
    if not pool.grows:
        out += _shared_ports(job, len(hosts), pool.name)
    most_slots = max(len(a.slot_ids) for a in agents)
    cpus = [a.cpus for a in agents]
    cpus_known = pool.books_cpus and not pool.grows and all(c > 0 for c in cpus)
    for i, role in enumerate(job.task_roles):
        if role.gpu_number > most_slots:
            out.append(ConfigError(f"taskRoles[{i}].gpuNumber",
                                   f"each task needs {role.gpu_number} slots, and agents of resource pool "
                                   f"{pool.name!r} have at most {most_slots}"))
        if cpus_known and role.cpu_number > max(cpus):
            out.append(ConfigError(f"taskRoles[{i}].cpuNumber",
                                   f"each task needs {role.cpu_number} CPUs, and agents of resource pool "
                                   f"{pool.name!r} have at most {max(cpus)}"))
    if out:
        return out
    tasks = [(role, role.gpu_number) for role in job.task_roles for _ in range(role.task_number)]
    slots = tuple(n for _, n in tasks)
    shape = group_shape_error(slots, agents, pool.name)
    if shape:
        return [ConfigError("taskRoles", shape)]
    task_cpus = tuple(r.cpu_number for r, _ in tasks) if cpus_known else ()
    task_ports = tuple(fixed_ports(r) for r, _ in tasks) if not pool.grows else ()
    sizes = {a.agent_id: len(a.slot_ids) for a in agents}
    booking = bk.Booking(agents)
    if any(task_cpus) and bk.pack(slots, task_cpus, (), sizes, booking, idle=True) is None:
        have = ", ".join(str(c) for c in sorted(cpus, reverse=True)[:8])
        return [ConfigError("taskRoles", f"its tasks need {sum(task_cpus)} CPUs at once "
                                         f"({', '.join(str(c) for c in task_cpus)}), each task on one agent, and "
                                         f"the agents of resource pool {pool.name!r} have {have} CPUs")]
    if any(task_ports) and bk.pack(slots, task_cpus, task_ports, sizes, booking, idle=True) is None:
        return [ConfigError("taskRoles", f"its tasks' fixed ports cannot all be met at once: tasks wanting the same "
                                         f"port each need a host of their own, and resource pool {pool.name!r} has "
                                         f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}")]
    return out


def _shared_ports(job: PaiJob, hosts: int, pool: str) -> list[ConfigError]:
    """Tasks wanting a common fixed port each need a host of their own: one role's tasks, and the
    tasks of two roles whose fixed ranges overlap."""
    out: list[ConfigError] = []
    fixed = [fixed_ports(r) for r in job.task_roles]
    for i, role in enumerate(job.task_roles):
        for j in range(i, len(job.task_roles)):
            other = job.task_roles[j]
            common = fixed[i] & fixed[j]
            tasks = role.task_number + (other.task_number if j != i else 0)
            if not common or tasks <= hosts:
                continue
            k = next(k for k, p in enumerate(other.port_list) if p.begin_at and common & port_set(p))
            who = (f"its {role.task_number} tasks" if j == i
                   else f"the {tasks} tasks of roles {role.name!r} and {other.name!r}")
            out.append(ConfigError(
                f"taskRoles[{j}].portList[{k}].beginAt",
                f"{who} all want {'ports' if len(common) > 1 else 'port'} {port_ranges(common)}, so each needs a "
                f"host of its own, and resource pool {pool!r} has {hosts} host{'s' if hosts != 1 else ''}"))
    return out

