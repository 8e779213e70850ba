"""What the master recorded, read from its database: when each trial was created and when its
first allocation's ``TaskStarted`` was recorded (``allocations.started_at``, the master's clock)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from controlplane.master.db.models import Allocation, Trial


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


async def start_latencies(engine: AsyncEngine) -> list[tuple[float, float]]:
    """(trial created, unix seconds; create -> RUNNING seconds) of every trial whose first allocation
    started."""
    async with engine.connect() as conn:
        rows = (await conn.execute(
            select(Trial.start_time, func.min(Allocation.started_at))
            .join(Allocation, Allocation.trial_id == Trial.id)
            .where(Allocation.started_at.is_not(None)).group_by(Trial.id, Trial.start_time))).all()
    return [(_utc(created).timestamp(), (_utc(started) - _utc(created)).total_seconds()) for created, started in rows
            if started is not None]


async def created_times(engine: AsyncEngine) -> list[float]:
    """When each trial was created, unix seconds."""
    async with engine.connect() as conn:
        return [_utc(t).timestamp() for t in (await conn.scalars(select(Trial.start_time))).all()]


async def running_count(engine: AsyncEngine) -> int:
    """Allocations the master has recorded as started and not ended."""
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(Allocation).where(
            Allocation.started_at.is_not(None), Allocation.ended_at.is_(None))) or 0)
