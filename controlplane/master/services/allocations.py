"""An allocation as its own task reads and signals it: the preemption flag, the acknowledgement,
its owner (whom a task token acts for) and its placed ranks for the rendezvous; and a trial's
allocations, its runs, as the trial page lists them."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Allocation, Experiment, Trial
from controlplane.master.errors import Conflict, NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.state import allocation as A


async def preempt_state(rt: MasterRuntime, alloc_id: str) -> tuple[bool, bool, bool]:
    """(preempt?, allocation still live?, its task watches the signal already?)"""
    async with rt.sessions() as session:
        row = (await session.execute(select(Allocation.preempt_requested, Allocation.state,
                                            Allocation.watches_preemption)
                                     .where(Allocation.id == alloc_id))).first()
    if row is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return bool(row[0]), row[1] != A.TERMINATED, bool(row[2])


async def note_watching(rt: MasterRuntime, alloc_id: str) -> None:
    """Its own task polls the preemption signal: it declared it checkpoints and exits when asked,
    which lets consolidation move it (``autoscaling/consolidation.py``). Written once."""
    async with rt.sessions.begin() as session:
        await session.execute(update(Allocation).where(
            Allocation.id == alloc_id, Allocation.state != A.TERMINATED,
            Allocation.watches_preemption.is_(False)).values(watches_preemption=True))


async def owner_of(rt: MasterRuntime, alloc_id: str) -> int:
    """The user whose experiment the allocation runs."""
    async with rt.sessions() as session:
        owner = (await session.execute(select(Experiment.owner_id).select_from(Allocation)
                                       .join(Trial, Trial.id == Allocation.trial_id)
                                       .join(Experiment, Experiment.id == Trial.experiment_id)
                                       .where(Allocation.id == alloc_id))).first()
    if owner is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return int(owner[0])


async def ack_preemption(rt: MasterRuntime, alloc_id: str) -> None:
    """Acknowledged while the allocation lives (an ack for an ended one is a Conflict)."""
    async with rt.sessions.begin() as session:
        result = await session.execute(update(Allocation).where(
            Allocation.id == alloc_id, Allocation.state != A.TERMINATED).values(preempt_acked=True))
        if result.rowcount == 0:
            raise Conflict(f"allocation {alloc_id} has ended (state {A.TERMINATED}): nothing to acknowledge")


async def get(rt: MasterRuntime, alloc_id: str) -> Allocation:
    async with rt.sessions() as session:
        alloc = await session.get(Allocation, alloc_id)
    if alloc is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return alloc


async def of_trial(session: AsyncSession, trial_id: int, limit: int) -> list[Allocation]:
    """The trial's first ``limit`` allocations, oldest first."""
    return list((await session.scalars(select(Allocation).where(Allocation.trial_id == trial_id)
                                       .order_by(Allocation.created_at).limit(limit))).all())
