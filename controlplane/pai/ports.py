"""Port reservation for a placed PAI job: each task's port types get concrete ports on its agent.

Source: microsoft/pai at 0db059b215d497ca09fd9974cd7bc668f7090b5c,
``subprojects/frameworklauncher/yarn/src/main/java/com/microsoft/frameworklauncher/common/utils/PortUtils.java``
(``toPortString``): a port type with a non-zero ``beginAt`` ("start") takes exactly
``beginAt .. beginAt + portNumber - 1``; one with ``beginAt == 0`` takes the lowest free ports,
sequentially, after every static range is set aside. The guide (``docs/job_tutorial.md``) says
"0 for random selection": lowest-first is what the launcher actually does, and it is reproducible.

Here, unlike YARN, several tasks may share an agent, so ports are booked per agent across all its
tasks (and the ports it already uses). Static ports must lie in the agent's range too: the range is
what the agent offers jobs. Tasks are served in role order, then task index, so the result is
deterministic.

Unlike YARN, too, a host may run the agents of two masters (two clusters on one machine, or a test
run beside another), and neither master knows the other's ports. The scan for dynamic ports
therefore starts at ``AgentPorts.start`` (the master hashes it from the job's id, as it does for a
trial's rendezvous ports) and wraps around the range: lowest-first from there. With ``start`` at
``low`` it is the launcher's own order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.pai.spec import PaiJob, TaskRole

TaskKey = tuple[str, int]  # (role name, task index)


@dataclass(frozen=True)
class AgentPorts:
    low: int  # the agent's port range for jobs, inclusive
    high: int
    used: frozenset[int] = frozenset()
    start: int | None = None  # where the scan for dynamic ports begins (None: at low)


class PortError(ValueError):
    def __init__(self, task: TaskKey, agent: str, message: str) -> None:
        self.task = task
        self.agent = agent
        super().__init__(f"{task[0]}[{task[1]}] on agent {agent}: {message}")


def assign_ports(job: PaiJob, placement: Mapping[TaskKey, str],
                 agents: Mapping[str, AgentPorts]) -> dict[TaskKey, dict[str, tuple[int, ...]]]:
    """Per task, label -> its ports (in the role's port order: declared, then ``http``, ``ssh``)."""
    books = {agent_id: _Book(a) for agent_id, a in agents.items()}
    out: dict[TaskKey, dict[str, tuple[int, ...]]] = {}
    for role in job.task_roles:
        for index in range(role.task_number):
            key = (role.name, index)
            if key not in placement:
                raise ValueError(f"{role.name}[{index}] has no agent in the placement")
            agent_id = placement[key]
            if agent_id not in agents:
                raise PortError(key, agent_id, "unknown agent (no port range for it)")
            out[key] = _assign_task(key, role, agent_id, books[agent_id])
    return out


class _Book:
    """An agent's booked ports; every port below ``cursor`` is booked, so scans start there."""

    def __init__(self, agent: AgentPorts) -> None:
        self.agent = agent
        self.taken = set(agent.used)
        start = agent.low if agent.start is None else agent.start
        self.cursor = start if agent.low <= start <= agent.high else agent.low
        self.scanned = 0  # ports looked at since the start: the scan wraps once, never twice

    def lowest_free(self, count: int) -> tuple[int, ...] | None:
        """The next ``count`` free ports from the cursor, wrapping past ``high`` to ``low``."""
        low, size = self.agent.low, self.agent.high - self.agent.low + 1
        found: list[int] = []
        n, scanned = self.cursor, self.scanned
        while scanned < size:
            scanned += 1
            if n not in self.taken:
                found.append(n)
                if len(found) == count:
                    self.taken.update(found)
                    self.cursor = low + (n + 1 - low) % size
                    self.scanned = scanned
                    return tuple(found)
            n = low + (n + 1 - low) % size
        return None


def _assign_task(key: TaskKey, role: TaskRole, agent_id: str, book: _Book) -> dict[str, tuple[int, ...]]:
    agent, taken = book.agent, book.taken
    got: dict[str, tuple[int, ...]] = {}
    for p in role.ports:  # static ranges first, so a dynamic port never steals one
        if p.begin_at == 0:
            continue
        wanted = range(p.begin_at, p.begin_at + p.port_number)
        outside = [n for n in wanted if not agent.low <= n <= agent.high]
        if outside:
            raise PortError(key, agent_id, f"port type {p.label!r} wants {p.begin_at}-{wanted[-1]}, outside the "
                                           f"agent's range {agent.low}-{agent.high}")
        busy = [n for n in wanted if n in taken]
        if busy:
            raise PortError(key, agent_id, f"port type {p.label!r} wants {p.begin_at}-{wanted[-1]}, but "
                                           f"{', '.join(map(str, busy[:5]))} already in use on the agent")
        taken.update(wanted)
        got[p.label] = tuple(wanted)
    for p in role.ports:
        if p.begin_at != 0:
            continue
        free = book.lowest_free(p.port_number)
        if free is None:
            raise PortError(key, agent_id, f"port type {p.label!r} needs {p.port_number} free port(s); the "
                                           f"agent's range {agent.low}-{agent.high} has too few left")
        got[p.label] = free
    return {p.label: got[p.label] for p in role.ports}

