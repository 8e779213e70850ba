"""Reads of the state changes the orchestrator records (``orchestration/transitions.py``), each with
its time and reason: a trial's, as the trial page lists its restarts."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import StateTransition


async def of_trial(session: AsyncSession, trial_id: int, limit: int) -> list[StateTransition]:
    """The trial's first ``limit`` state changes, oldest first."""
    return list((await session.scalars(select(StateTransition).where(
        StateTransition.entity == "trial", StateTransition.entity_id == str(trial_id))
        .order_by(StateTransition.id).limit(limit))).all())
