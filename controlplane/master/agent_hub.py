"""Live agent connections. Memory only: after a master restart agents reconnect and re-register.

`away_since` holds the agents that went away and may still come back: an entry is made when a
connection drops (and at start for the agents that were connected when the master stopped)
and removed when the agent re-registers or when the orchestrator declares it lost after
`agent_reconnect_wait`. Its times come from `clock` (monotonic; tests give a fake one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.master.agent_inbox import AgentInbox
from controlplane.wire import agent_protocol as wire


@dataclass
class AgentConnection:
    agent_id: str
    pool: str
    slots: list[wire.Slot]
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    registered_at: float = field(default_factory=time.monotonic)
    # Allocations the agent said it still ran when it (re)registered.
    running_at_register: frozenset[str] = frozenset()
    # The allocations placed on it before this registration were checked for ones it forgot
    # (orchestration/orphans.py): once per connection, not at every tick.
    orphans_checked: bool = False
    address: str = "127.0.0.1"  # where other ranks of a gang reach this agent
    overlay_port: int = 0  # Register.overlay_port: 0 when its tasks run on its host's network
    # Task environments it offers (Register.environments): what environment.image may name.
    environments: tuple[str, ...] = (wire.DEFAULT_ENVIRONMENT,)
    instance_type: str = ""  # Register.instance_type: "" when the agent does not know
    cpus: int = 0  # Register.cpus: 0 when the agent did not say

    @property
    def slot_type(self) -> str:
        """Its slots' device type (CPU for an agent without slots): picks from an image map."""
        return self.slots[0].type if self.slots else "cpu"

    @property
    def overlay_endpoint(self) -> tuple[str, int]:
        return self.address, self.overlay_port

    def send(self, msg: wire.MasterMessage) -> None:
        self.outbox.put_nowait(msg)


class AgentHub:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.connections: dict[str, AgentConnection] = {}
        # agent id -> monotonic time it went away (agents known from the DB start here too).
        self.away_since: dict[str, float] = {}
        # agent id -> the environments it offered when it last registered with this master.
        self.environments: dict[str, tuple[str, ...]] = {}
        # agent id -> the instance type it said it runs on when it last registered ("" unknown).
        self.instance_types: dict[str, str] = {}
        # agent id -> what it sent that is still to be applied (agent_inbox.py)
        self.inboxes: dict[str, AgentInbox] = {}

    def attach(self, conn: AgentConnection) -> AgentConnection | None:
        """Adds a connection; returns the one it replaces (an agent that reconnected fast)."""
        old = self.connections.get(conn.agent_id)
        self.connections[conn.agent_id] = conn
        self.environments[conn.agent_id] = conn.environments
        self.instance_types[conn.agent_id] = conn.instance_type
        self.away_since.pop(conn.agent_id, None)
        return old

    def detach(self, conn: AgentConnection) -> bool:
        """Removes this connection if it is still the current one for its agent."""
        if self.connections.get(conn.agent_id) is conn:
            del self.connections[conn.agent_id]
            self.away_since[conn.agent_id] = self.clock()
            return True
        return False

    def pending_exits(self) -> set[str]:
        """Allocations whose exit an agent reported and the master has not applied yet."""
        return set().union(*(inbox.pending_exits() for inbox in self.inboxes.values()))

    def close_inboxes(self) -> None:
        for inbox in self.inboxes.values():
            inbox.close()

    def lost(self, wait_s: float) -> list[str]:
        """Agents away for longer than `wait_s`."""
        now = self.clock()
        return [a for a, since in self.away_since.items() if now - since > wait_s]

    def send(self, agent_id: str, msg: wire.MasterMessage) -> bool:
        conn = self.connections.get(agent_id)
        if conn is None:
            return False
        conn.send(msg)
        return True
