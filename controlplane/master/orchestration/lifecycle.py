"""Trial and allocation bookkeeping inside one DB transaction (no I/O beyond the session)."""

from __future__ import annotations

import secrets
import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.config.stored import SearcherView
from controlplane.master.db.models import Allocation, Checkpoint, Experiment, Trial
from controlplane.master.orchestration.transitions import move, record_initial
from controlplane.master.token_cache import TokenCaches, token_hash
from controlplane.scheduler.model import DEFAULT_PRIORITY
from controlplane.searchers.base import Create
from controlplane.state import allocation as A
from controlplane.state import checkpoint as CK
from controlplane.state import trial as T

LIVE_ALLOCATION_STATES = (A.PENDING, A.ASSIGNED, A.RUNNING)


async def create_trial(session: AsyncSession, exp: Experiment, action: Create) -> Trial:
    trial = Trial(
        experiment_id=exp.id, request_id=action.request_id, task_id=f"{exp.id}.{uuid.uuid4()}",
        hparams=action.hparams, seed=action.seed, state=T.QUEUED, restarts=0, run_id=0,
        total_batches=0, start_time=utcnow(), warm_start_checkpoint=await _warm_start_of(session, exp),
    )
    session.add(trial)
    await session.flush()
    record_initial(session, trial, f"created by the searcher (request {action.request_id})")
    queue_allocation(session, exp, trial, "first run")
    return trial


async def warm_start_checkpoint(session: AsyncSession, searcher: SearcherView) -> Checkpoint | None:
    """Determined's ``checkpointFromTrialIDOrUUID``: ``searcher.source_trial_id``'s latest completed
    checkpoint (most steps), else the checkpoint ``searcher.source_checkpoint_uuid`` names (None:
    no such checkpoint, or no warm start asked for)."""
    if searcher.source_trial_id is not None:
        return await session.scalar(
            select(Checkpoint).where(Checkpoint.trial_id == searcher.source_trial_id, Checkpoint.state == CK.COMPLETED)
            .order_by(Checkpoint.steps_completed.desc(), Checkpoint.report_time.desc()).limit(1))
    if searcher.source_checkpoint_uuid is not None:
        return await session.get(Checkpoint, searcher.source_checkpoint_uuid)
    return None


async def _warm_start_of(session: AsyncSession, exp: Experiment) -> str | None:
    """The uuid a new trial of ``exp`` warm-starts from: the one its first trial got (Determined
    resolves it once per experiment, so a source trial that checkpoints on does not split the
    search), else resolved now (experiment creation refused a source that resolves to nothing)."""
    searcher = exp.searcher
    if searcher.source_trial_id is None and searcher.source_checkpoint_uuid is None:
        return None
    earlier = await session.scalar(select(Trial.warm_start_checkpoint).where(
        Trial.experiment_id == exp.id, Trial.warm_start_checkpoint.is_not(None)).limit(1))
    if earlier is not None:
        return earlier
    ckpt = await warm_start_checkpoint(session, searcher)
    return ckpt.uuid if ckpt is not None else searcher.source_checkpoint_uuid


def queue_allocation(session: AsyncSession, exp: Experiment, trial: Trial, reason: str) -> Allocation:
    trial.run_id += 1
    resources = exp.config.get("resources") or {}
    alloc = Allocation(
        id=f"{trial.task_id}.{trial.run_id}", task_id=trial.task_id, trial_id=trial.id, state=A.PENDING,
        resource_pool=exp.resource_pool, slots_needed=int(resources.get("slots_per_trial", 1)),
        priority=resources.get("priority") or DEFAULT_PRIORITY,
        # Placeholder until placement mints the real token: nobody holds this one.
        token_hash=token_hash(secrets.token_urlsafe(32)),
        created_at=utcnow(),
    )
    session.add(alloc)
    record_initial(session, alloc, reason)
    return alloc


def mint_token(alloc: Allocation) -> str:
    token = secrets.token_urlsafe(32)
    alloc.token_hash = token_hash(token)
    return token


async def live_allocation(session: AsyncSession, trial_id: int) -> Allocation | None:
    return await session.scalar(
        select(Allocation).where(Allocation.trial_id == trial_id, Allocation.state.in_(LIVE_ALLOCATION_STATES))
    )


def end_allocation(session: AsyncSession, tokens: TokenCaches, alloc: Allocation, reason: str,
                   exit_code: int | None = None) -> None:
    """The allocation is over; its token is refused from now on (``tokens``: the master's cache)."""
    alloc.exit_code = exit_code
    alloc.exit_reason = reason
    alloc.ended_at = utcnow()
    move(session, alloc, A.TERMINATED, reason)
    tokens.tasks.drop(alloc.token_hash)


async def latest_checkpoint(session: AsyncSession, trial: Trial) -> Checkpoint | None:
    if not trial.latest_checkpoint:
        return None
    return await session.get(Checkpoint, trial.latest_checkpoint)


def finish_trial(session: AsyncSession, trial: Trial, state: str, reason: str) -> None:
    move(session, trial, state, reason)
    if T.TRIAL.is_terminal(state):
        trial.end_time = utcnow()
        if state == T.COMPLETED:
            trial.progress = 1.0
