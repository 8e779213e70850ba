"""Consolidation, the master's side: what the planner sees of the work on each agent, acting on
its drains, and what `det resource-pool describe` shows of them. The decision itself is the pure
planner's (``controlplane/autoscaler/consolidation.py``).

What a trial allocation is, to the planner (`TaskView`):
- movable: it is a trial's (commands, shells, notebooks, TensorBoards and OpenPAI tasks, which
  have no ``trial_id``, never are) and either checkpointed on a preemption before (an earlier
  allocation of the trial ended after acknowledging its preemption, exit 0, and the trial has a
  checkpoint) or declared it can: its task long-polls its preemption signal
  (``Allocation.watches_preemption``, set by ``GET /api/v1/allocations/{id}/signals/preemption``
  called with the allocation's own token), which Determined's harness and core API, and ours, do
  from the start when they watch for preemption;
- started_at: the trial's first start (its earliest allocation's), on the tick's clock;
- moves: how many times consolidation moved the trial (rows of ``consolidation_moves``).
All of it comes with the pool's live allocations in ONE statement (``live_statement``), the one the
reconciler reads its demand from.

A drain (`act`) goes through the orchestrator (``Orchestrator.drain_agent``): in one transaction
the agent takes no new work, a row per move records why, the trial's logs say so, and each moved
allocation is asked to checkpoint and exit, as pause does; it is re-queued from that checkpoint
on another agent, not counted as a restart. An agent is "consolidating" while it is draining and
consolidation moved work off it in the drain in progress: a move whose drain the admin ended by
enabling the agent (``end_drains``, ``drain_ended_at``) no longer counts. Derived from the moves, so
it survives a master restart; the planner terminates a consolidating agent as soon as it is empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from controlplane.autoscaler import Drain, TaskView
from controlplane.common.timeutil import epoch, utcnow
from controlplane.master.db.models import Agent, Allocation, ConsolidationMove, Instance, TaskLog, Trial
from controlplane.master.orchestration import gang
from controlplane.state import allocation as A

MAX_MOVES_SHOWN = 20
# Orchestrator.drain_agent: (agent id, allocation id -> reason, record(session, moved)) -> the allocations moved
DrainAgent = Callable[[str, Mapping[str, str], Callable[[AsyncSession, list[Allocation]], None]],
                      Awaitable[list[Allocation]]]


@dataclass(frozen=True)
class LiveRow:
    """A live allocation of the pool, with what consolidation needs of its trial."""

    alloc: Allocation
    progress: float = 0.0
    first_start: datetime | None = None
    resumable: bool = False  # the trial checkpointed on a preemption before
    moves: int = 0

    @property
    def movable(self) -> bool:
        return self.alloc.trial_id is not None and self.alloc.pai_job_id is None and (
            self.resumable or self.alloc.watches_preemption)


def live_statement(pool: str) -> Select[Any]:
    """The pool's live allocations with their trials' progress, first start, whether they
    checkpointed on a preemption before, and their moves: one statement (read committed gives
    each statement its own snapshot), O(live allocations) with the indexes on ``trial_id``."""
    prior = aliased(Allocation)
    earlier = aliased(Allocation)
    first_start = (select(func.min(earlier.started_at)).where(earlier.trial_id == Allocation.trial_id)
                   .correlate(Allocation).scalar_subquery())
    acked_before = exists().where(
        prior.trial_id == Allocation.trial_id, prior.id != Allocation.id, prior.state == A.TERMINATED,
        prior.preempt_acked.is_(True), prior.exit_code == 0).correlate(Allocation)
    moves = (select(func.count(ConsolidationMove.id)).where(ConsolidationMove.trial_id == Allocation.trial_id)
             .correlate(Allocation).scalar_subquery())
    return (select(Allocation, Trial.progress, first_start, Trial.latest_checkpoint.is_not(None) & acked_before,
                   moves)
            .outerjoin(Trial, Trial.id == Allocation.trial_id)
            .where(Allocation.resource_pool == pool, Allocation.state.in_((A.PENDING, A.ASSIGNED, A.RUNNING))))


async def live_allocations(session: AsyncSession, pool: str) -> list[LiveRow]:
    rows = (await session.execute(live_statement(pool))).all()
    return [LiveRow(alloc, float(progress or 0.0), first, bool(resumable), int(moves or 0))
            for alloc, progress, first, resumable, moves in rows]


def work_on_agents(rows: Sequence[LiveRow], now: float, wall_now: float) -> tuple[dict[str, set[int]],
                                                                                    dict[str, list[TaskView]]]:
    """Per agent: the slot ids live allocations hold, and one `TaskView` per allocation on it.
    Database times are wall-clock; they are moved onto the tick's clock (``now``) by their age."""
    used: dict[str, set[int]] = {}
    tasks: dict[str, list[TaskView]] = {}
    for row in rows:
        a = row.alloc
        if a.state == A.PENDING:
            continue
        ranks = gang.resources_of(a)
        started = row.first_start or a.started_at or a.assigned_at or a.created_at
        started_at = now - max(0.0, wall_now - epoch(started, wall_now))
        spans = len({r.agent_id for r in ranks}) > 1
        progress = row.progress if 0.0 < row.progress < 1.0 else 0.0
        for r in ranks:
            used.setdefault(r.agent_id, set()).update(r.slot_ids)
            tasks.setdefault(r.agent_id, []).append(TaskView(
                a.id, len(r.slot_ids), started_at, movable=row.movable, moves=row.moves, progress=progress,
                spans_agents=spans))
    return used, tasks


@dataclass(frozen=True)
class AgentFlags:
    draining: bool  # takes no new work: disabled, draining (spot notice, det agent disable, consolidation)
    consolidating: bool  # drained by consolidation
    disabled_slots: frozenset[str]


async def agent_flags(session: AsyncSession, agent_ids: Sequence[str]) -> dict[str, AgentFlags]:
    if not agent_ids:
        return {}
    moved_off = exists().where(ConsolidationMove.instance_id == Agent.id, ConsolidationMove.drain_ended_at.is_(None))
    rows = (await session.execute(select(Agent.id, Agent.enabled, Agent.draining, Agent.disabled_slots, moved_off)
                                  .where(Agent.id.in_(agent_ids)))).all()
    out = {}
    for agent_id, enabled, draining, disabled, moved in rows:
        off = disabled if isinstance(disabled, dict) else {}  # det slot disable: slot id -> draining
        out[str(agent_id)] = AgentFlags(draining=bool(draining) or not enabled,
                                        consolidating=bool(draining) and bool(moved),
                                        disabled_slots=frozenset(str(k) for k in off))
    return out


async def end_drains(session: AsyncSession, agent_id: str) -> None:
    """The admin enabled the agent: consolidation's drain of it is over, so a later drain (the
    admin's) does not get it terminated once empty."""
    await session.execute(update(ConsolidationMove).where(ConsolidationMove.instance_id == agent_id,
                                                          ConsolidationMove.drain_ended_at.is_(None))
                          .values(drain_ended_at=utcnow()))


async def act(pool: str, drain: Drain, drain_agent: DrainAgent, max_moves: int,
              moves_before: Mapping[str, int]) -> list[str]:
    """Drains ``drain.instance_id`` through the orchestrator; the ids of the allocations moved
    (none when the picture changed since the planner saw it: the next tick decides again)."""
    drain_id = uuid.uuid4().hex
    to_agent = {m.task_id: m.to_agent for m in drain.moves}
    reasons = {m.task_id: f"consolidation: moving off {drain.instance_id} to free it" for m in drain.moves}
    now = utcnow()

    def record(session: AsyncSession, moved: list[Allocation]) -> None:
        for alloc in moved:
            assert alloc.trial_id is not None  # drain_agent moves trials only
            session.add(ConsolidationMove(
                pool=pool, drain_id=drain_id, instance_id=drain.instance_id, trial_id=alloc.trial_id,
                allocation_id=alloc.id, to_agent=to_agent[alloc.id], reason=drain.reason,
                usd_per_hour=drain.usd_per_hour, expected_saving_usd=drain.expected_saving_usd, created_at=now))
            n = moves_before.get(alloc.id, 0) + 1
            line = (f"[autoscaler] moving this trial off agent {drain.instance_id} (move {n} of at most {max_moves}): "
                    f"it checkpoints now and resumes from that checkpoint on another agent "
                    f"({to_agent[alloc.id]} expected). Why: {drain.reason}\n")
            session.add(TaskLog(task_id=alloc.task_id, trial_id=alloc.trial_id, allocation_id=alloc.id,
                                agent_id=drain.instance_id, stdtype="stdout", level="LOG_LEVEL_INFO", source="master",
                                timestamp=now, log=line))

    moved = await drain_agent(drain.instance_id, reasons, record)  # wakes the trials' log followers
    return [a.id for a in moved]


@dataclass(frozen=True)
class MoveSummary:
    moves: list[ConsolidationMove]  # the latest, newest first
    count: int
    saved_usd: float


async def summary(session: AsyncSession, pool: str, limit: int = MAX_MOVES_SHOWN) -> MoveSummary:
    """The pool's latest moves, how many there were, and what they are estimated to have saved:
    the planner's expected saving (over the moved work's expected remaining time, net of the
    moves' cost) of each drained instance that has since been terminated. Bounded: a page of rows,
    a count and a sum in SQL."""
    latest = list((await session.scalars(select(ConsolidationMove).where(ConsolidationMove.pool == pool)
                                         .order_by(ConsolidationMove.created_at.desc(), ConsolidationMove.id.desc())
                                         .limit(limit))).all())
    count = await session.scalar(select(func.count(ConsolidationMove.id)).where(ConsolidationMove.pool == pool)) or 0
    drains = (select(ConsolidationMove.drain_id, ConsolidationMove.expected_saving_usd.label("saving"))
              .join(Instance, Instance.id == ConsolidationMove.instance_id)
              .where(ConsolidationMove.pool == pool, Instance.terminated_at.is_not(None)).distinct()).subquery()
    saved = await session.scalar(select(func.coalesce(func.sum(drains.c.saving), 0.0))) if count else 0.0
    return MoveSummary(latest, int(count), round(float(saved or 0.0), 4))

