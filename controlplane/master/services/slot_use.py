"""Which live allocation holds each agent's slots: what the agents API and the cluster page show."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Allocation
from controlplane.master.orchestration import gang
from controlplane.state import allocation as A


async def slot_use(session: AsyncSession) -> dict[str, dict[int, str]]:
    """agent id -> slot id -> the allocation holding it (bounded by the cluster's slots)."""
    use: dict[str, dict[int, str]] = {}
    for alloc in (await session.scalars(select(Allocation).where(Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all():
        for r in gang.resources_of(alloc):
            for sid in r.slot_ids:
                use.setdefault(r.agent_id, {})[sid] = alloc.id
    return use
