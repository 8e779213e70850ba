"""Which allocations may be live on each agent: the work on one agent (its loss, a spot notice, a
drain, its orphans) reads those rows by primary key, not every live allocation with its ranks decoded.

An allocation's agents are in its ``resources`` JSON (``Allocation.agent_id`` is rank 0's alone), which
neither database indexes, so the orchestrator keeps this in memory. It is a superset of the truth, and
every read still asks the database (state live, the agent among its ranks): an id is added when its
allocation is placed, before that transaction commits (one that rolls back leaves an id naming nothing
live), and dropped only after a transaction that ended it, or read it not live, has committed, unless
it was placed again since that read. Rebuilt from the database when the master starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import gang
from controlplane.state import allocation as A

LIVE = (A.ASSIGNED, A.RUNNING)


class LiveIndex:
    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._on: dict[str, set[str]] = {}  # agent id -> allocation ids
        self._agents: dict[str, tuple[str, ...]] = {}  # allocation id -> its agents
        self._added: dict[str, int] = {}  # allocation id -> the count of adds when it was last added
        self.adds = 0

    def add(self, alloc_id: str, agent_ids: Iterable[str]) -> None:
        agents = tuple(dict.fromkeys((*self._agents.get(alloc_id, ()), *agent_ids)))
        self._agents[alloc_id] = agents
        for agent_id in agents:
            self._on.setdefault(agent_id, set()).add(alloc_id)
        self.adds += 1
        self._added[alloc_id] = self.adds

    def placed(self, alloc: Allocation) -> None:
        self.add(alloc.id, gang.agents_of(alloc))

    def drop(self, alloc_ids: Iterable[str], seen_at: int) -> None:
        """Forgets allocations read not live when ``adds`` was ``seen_at``; one placed since stays."""
        for alloc_id in alloc_ids:
            if self._added.get(alloc_id, 0) > seen_at:
                continue
            self._added.pop(alloc_id, None)
            for agent_id in self._agents.pop(alloc_id, ()):
                ids = self._on.get(agent_id)
                if ids is not None:
                    ids.discard(alloc_id)
                    if not ids:
                        del self._on[agent_id]

    def ids_on(self, agent_ids: Iterable[str]) -> set[str]:
        return set().union(*(self._on.get(a, ()) for a in agent_ids))

    def __len__(self) -> int:
        return len(self._agents)

    async def rebuild(self, session: AsyncSession) -> set[str]:
        """Reads the live allocations (columns only); returns the agents they run on."""
        self._clear()
        rows: Sequence[tuple[str, str | None, list[Any], list[Any]]] = (await session.execute(select(
            Allocation.id, Allocation.agent_id, Allocation.slot_ids, Allocation.resources,
        ).where(Allocation.state.in_(LIVE)))).all()
        for alloc_id, agent_id, slot_ids, resources in rows:
            self.add(alloc_id, (r.agent_id for r in gang.ranks_in(resources, agent_id, slot_ids)))
        return set(self._on)
