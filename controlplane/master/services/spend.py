"""What the autoscaler's instances cost, and which experiments used them.

An instance costs ``price_per_hour`` from launch to termination (or now), used or idle: that is
a pool's spend. An experiment pays, for each allocation of its trials and for each agent of the
allocation's gang that is an instance (agent id == instance id), the time the allocation held
slots there (assigned to ended, or now, within the instance's life) × price × the share of the
instance's slots it held. Idle instance time belongs to the pool, not to an experiment.

Every answer is a bounded number of queries (two or three) and of rows: a page of experiment ids,
or a window of at most ``MAX_BUCKETS`` buckets and ``MAX_ROWS`` rows of each table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec
from sqlalchemy import ColumnElement, Select, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import epoch
from controlplane.master.db.models import Agent, Allocation, Instance, Trial
from controlplane.master.orchestration.gang import Rank

MAX_EXPERIMENTS = 1000  # ids per experiment_spend call: a page, never the whole table
MAX_BUCKETS = 500
MAX_ROWS = 20_000  # allocations (and instances) read for one time series
TOP_EXPERIMENTS = 10  # experiments a time series names; the rest are summed as "other"


@dataclass(frozen=True)
class Hold:
    """Slots one allocation held on one agent, from start to end (epoch seconds)."""

    experiment_id: int
    agent_id: str
    slots: int
    start: float
    end: float


@dataclass(frozen=True)
class Machine:
    """An instance as spend sees it: its life (epoch seconds), price and slot count."""

    pool: str
    start: float
    end: float
    price_per_hour: float
    slots: int  # 0: unknown (its agent never registered)


def _holds_of(rows: Iterable[Any], now: float) -> list[Hold]:
    out = []
    for exp_id, assigned, started, ended, agent_id, slot_ids, resources in rows:
        start = epoch(assigned or started, now)
        end = epoch(ended, now)
        ranks = (msgspec.convert(resources, list[Rank]) if resources
                 else [Rank(agent_id=agent_id, slot_ids=slot_ids or [])] if agent_id else [])
        for r in ranks:
            if r.agent_id and end > start:
                out.append(Hold(exp_id, r.agent_id, max(1, len(r.slot_ids)), start, end))
    return out


def _hold_query(where: ColumnElement[bool]) -> Select[Any]:  # a Select of the columns _holds_of reads
    return (select(Trial.experiment_id, Allocation.assigned_at, Allocation.started_at, Allocation.ended_at,
                   Allocation.agent_id, Allocation.slot_ids, Allocation.resources)
            .join(Trial, Trial.id == Allocation.trial_id)
            .where(Allocation.agent_id.is_not(None), where))


async def _machines(session: AsyncSession, where: ColumnElement[bool], now: float) -> dict[str, Machine]:
    rows = await session.execute(
        select(Instance.id, Instance.pool, Instance.launched_at, Instance.terminated_at, Instance.price_per_hour,
               Agent.slots)
        .outerjoin(Agent, Agent.id == Instance.id).where(where).limit(MAX_ROWS))
    return {r.id: Machine(r.pool, epoch(r.launched_at, now), epoch(r.terminated_at, now),
                          float(r.price_per_hour or 0.0), len(r.slots or [])) for r in rows}


def hold_cost(hold: Hold, machine: Machine, lo: float, hi: float) -> float:
    """USD of ``hold`` between ``lo`` and ``hi``, clipped to the instance's life."""
    seconds = min(hold.end, machine.end, hi) - max(hold.start, machine.start, lo)
    if seconds <= 0:
        return 0.0
    share = min(1.0, hold.slots / machine.slots) if machine.slots else 1.0
    return seconds * machine.price_per_hour / 3600.0 * share


async def experiment_spend(session: AsyncSession, exp_ids: Sequence[int], now: datetime) -> dict[int, float]:
    """USD each experiment has cost so far on autoscaled instances (0.0 for none); two queries."""
    ids = sorted(set(exp_ids))
    if len(ids) > MAX_EXPERIMENTS:
        raise ValueError(f"exp_ids: at most {MAX_EXPERIMENTS} experiments at once, got {len(ids)}")
    out = dict.fromkeys(ids, 0.0)
    if not ids:
        return out
    t_now = now.timestamp()
    holds = _holds_of(await session.execute(_hold_query(Trial.experiment_id.in_(ids))), t_now)
    agents = {h.agent_id for h in holds}
    machines = await _machines(session, Instance.id.in_(sorted(agents)), t_now) if agents else {}
    for h in holds:
        m = machines.get(h.agent_id)
        if m is not None:
            out[h.experiment_id] += hold_cost(h, m, h.start, h.end)
    return out


@dataclass
class SpendSeries:
    """Spend per bucket (USD) from ``start``: per pool (whole instances, idle time included) and
    per experiment (the slots it held), the top ``TOP_EXPERIMENTS`` by total and the rest as 0."""

    start: float
    bucket_s: int
    times: list[float]  # each bucket's start, epoch seconds
    pools: dict[str, list[float]] = field(default_factory=dict)
    experiments: dict[int, list[float]] = field(default_factory=dict)
    other: list[float] = field(default_factory=list)  # experiments beyond the top ones
    truncated: bool = False  # more rows than MAX_ROWS: the oldest were left out


def _spread(series: list[float], start: float, bucket_s: int, lo: float, hi: float, cost: float) -> None:
    """Add ``cost``, spent evenly from ``lo`` to ``hi``, to the buckets it overlaps."""
    if hi <= lo or cost <= 0:
        return
    rate = cost / (hi - lo)
    first = max(0, int((lo - start) // bucket_s))
    last = min(len(series) - 1, int((hi - start) // bucket_s))
    for i in range(first, last + 1):
        b0 = start + i * bucket_s
        overlap = min(hi, b0 + bucket_s) - max(lo, b0)
        if overlap > 0:
            series[i] += overlap * rate


async def spend_over_time(session: AsyncSession, now: datetime, *, window: timedelta = timedelta(days=7),
                          bucket: timedelta = timedelta(days=1)) -> SpendSeries:
    """Spend per pool and per experiment in buckets of ``bucket`` over the last ``window``; three
    queries, at most ``MAX_ROWS`` rows each."""
    bucket_s = int(bucket.total_seconds())
    if bucket_s < 60:
        raise ValueError("bucket: at least one minute")
    n = int(window.total_seconds() // bucket_s)
    if not 1 <= n <= MAX_BUCKETS:
        raise ValueError(f"window: between 1 and {MAX_BUCKETS} buckets of {bucket_s} s, got {n}")
    t_now = now.timestamp()
    start = t_now - n * bucket_s
    lo_dt = now - timedelta(seconds=n * bucket_s)
    out = SpendSeries(start=start, bucket_s=bucket_s, times=[start + i * bucket_s for i in range(n)])
    alive = (Instance.launched_at < now) & or_(Instance.terminated_at.is_(None), Instance.terminated_at > lo_dt)
    machines = await _machines(session, alive, t_now)
    out.truncated = len(machines) >= MAX_ROWS
    for machine in machines.values():
        series = out.pools.setdefault(machine.pool, [0.0] * n)
        lo, hi = max(machine.start, start), min(machine.end, t_now)
        _spread(series, start, bucket_s, lo, hi, max(0.0, hi - lo) * machine.price_per_hour / 3600.0)
    if not machines:
        return out
    on_instance = Allocation.agent_id.in_(select(Instance.id).where(alive))
    in_window = (Allocation.assigned_at.is_not(None)) & (Allocation.assigned_at < now) \
        & or_(Allocation.ended_at.is_(None), Allocation.ended_at > lo_dt) & on_instance
    rows = (await session.execute(_hold_query(in_window).order_by(Allocation.assigned_at.desc())
                                  .limit(MAX_ROWS))).all()
    out.truncated = out.truncated or len(rows) >= MAX_ROWS
    per_exp: dict[int, list[float]] = {}
    for h in _holds_of(rows, t_now):
        m = machines.get(h.agent_id)
        if m is None:
            continue
        lo, hi = max(h.start, m.start, start), min(h.end, m.end, t_now)
        _spread(per_exp.setdefault(h.experiment_id, [0.0] * n), start, bucket_s, lo, hi,
                hold_cost(h, m, start, t_now))
    ranked = sorted(per_exp, key=lambda e: (-sum(per_exp[e]), e))
    out.experiments = {e: per_exp[e] for e in ranked[:TOP_EXPERIMENTS]}
    out.other = [sum(per_exp[e][i] for e in ranked[TOP_EXPERIMENTS:]) for i in range(n)]
    return out
