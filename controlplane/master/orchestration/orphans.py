"""An agent's orphans: allocations placed on it before it (re)registered that it did not list as running.

Each registration is checked once, ``ORPHAN_GRACE_S`` after it (time to deliver the exits it buffered
while away), not at every tick: nothing placed after a registration can be an orphan of it. It is
checked again at later ticks only while an exit of one of its allocations waits in its inbox (that
allocation ended; if the exit is never applied, the next check finds it). The reaper reads the
columns it needs of the live allocations on the agents due, by the ids the orchestrator's
``LiveIndex`` names (one query per tick, per 500 of them; none when they have nothing), never a
query per agent; a connection is marked checked only once the transaction that acted on the check
has committed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware
from controlplane.master.agent_hub import AgentConnection
from controlplane.master.db.batches import in_batches
from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.live_index import LIVE

# An agent that re-registers without an allocation it was running gets this long to deliver the
# allocation's buffered exit before the allocation is declared lost.
ORPHAN_GRACE_S = 5.0


@dataclass(frozen=True)
class LiveRank:
    """One agent's rank of a live allocation, as the orphan check needs it."""

    allocation_id: str
    assigned_at: datetime | None
    exited: bool


def due(connections: Iterable[AgentConnection], now: float) -> list[AgentConnection]:
    """The connections past their grace whose check is still to be made."""
    return [c for c in connections if not c.orphans_checked and now - c.registered_at >= ORPHAN_GRACE_S]


def mark_checked(conn: AgentConnection) -> None:
    conn.orphans_checked = True


async def live_ranks(session: AsyncSession, agent_ids: Collection[str],
                     ids: Collection[str]) -> dict[str, list[LiveRank]]:
    """Agent id -> its ranks of live allocations, for the agents named, read among ``ids`` (the
    orchestrator's ``LiveIndex`` names those that may be theirs). Columns, not rows: no ORM objects,
    and only these allocations' ranks decoded."""
    columns = select(Allocation.id, Allocation.assigned_at, Allocation.agent_id, Allocation.slot_ids,
                     Allocation.resources).where(Allocation.state.in_(LIVE))
    rows: list[tuple[str, datetime | None, str | None, list[Any], list[Any]]] = []
    for batch in in_batches(ids):
        rows += (await session.execute(columns.where(Allocation.id.in_(batch)))).all()
    found: dict[str, list[LiveRank]] = {}
    for alloc_id, assigned_at, agent_id, slot_ids, resources in rows:
        for rank in gang.ranks_in(resources, agent_id, slot_ids):
            if rank.agent_id in agent_ids:
                found.setdefault(rank.agent_id, []).append(LiveRank(alloc_id, aware(assigned_at), rank.exited))
    return found


def forgotten(conn: AgentConnection, ranks: Iterable[LiveRank], registered_wall: datetime,
              exiting: Collection[str]) -> tuple[list[str], bool]:
    """The allocations ``conn``'s agent should run but did not list, and whether the check is settled
    (False while an exit of one of them waits in an inbox: checked again at the next tick)."""
    lost: list[str] = []
    settled = True
    for rank in ranks:
        if rank.assigned_at is None or rank.assigned_at >= registered_wall or rank.exited \
                or rank.allocation_id in conn.running_at_register:
            continue
        if rank.allocation_id in exiting:
            settled = False
            continue
        lost.append(rank.allocation_id)
    return lost, settled
