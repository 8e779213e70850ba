"""`det resource-pool describe`: a pool's instances, cost, plan and reasons, as JSON."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from controlplane.autoscaler import PoolScaling, Shape
from controlplane.autoscaler.catalog import lookup
from controlplane.common.timeutil import epoch, iso
from controlplane.master.autoscaling.consolidation import MoveSummary
from controlplane.master.db.models import Instance
from controlplane.master.pools import PoolConfig
from controlplane.master.runtime import MasterRuntime
from controlplane.state import instance as INSTANCE


def instance_cost(row: Instance, now: float) -> float:
    """Per-second billing: instance-seconds from launch to termination (or now) × price."""
    start = epoch(row.launched_at, now)
    end = epoch(row.terminated_at, now)
    return max(0.0, end - start) * row.price_per_hour / 3600.0


class PoolInstance(msgspec.Struct, rename="camel", kw_only=True):
    id: str
    state: str
    instance_type: str
    zone: str
    spot: bool
    launched_at: str | None
    terminated_at: str | None
    age_seconds: float
    agent_id: str | None  # once it registered
    connected: bool
    cost_usd: float
    reason: str


class LiveShape(msgspec.Struct, rename="camel", kw_only=True):
    """How many live instances of one type and market the pool has, and what each costs an hour."""

    instance_type: str
    spot: bool
    price_per_hour: float
    count: int


def live_shapes(rows: list[Instance]) -> list[LiveShape]:
    """The pool's live (not terminated) instances by type, market and price: what it burns now."""
    counts: dict[tuple[str, bool, float], int] = {}
    for r in rows:
        if r.state != INSTANCE.TERMINATED:  # the reconciler's rule: live until it moves the row
            key = (r.instance_type, r.spot, float(r.price_per_hour or 0.0))
            counts[key] = counts.get(key, 0) + 1
    return [LiveShape(instance_type=t, spot=spot, price_per_hour=price, count=n)
            for (t, spot, price), n in sorted(counts.items())]


class PoolShape(msgspec.Struct, rename="camel", kw_only=True):
    """One instance type of the pool: its slots, GPU model and list prices ($/h; the catalogue's
    or master.yaml's `prices:`; 0 = unknown, spot then charged as on demand), and how many of it
    live now (``spotCount`` of them spot). ``configured`` is False for a live type the pool's
    config does not list (an instance adopted, or a type since removed)."""

    instance_type: str
    slots: int
    gpu_model: str
    usd_per_hour: float
    spot_usd_per_hour: float
    count: int
    spot_count: int
    configured: bool = True


def configured_shapes(pool: PoolConfig) -> tuple[Shape, ...]:
    """The pool's shapes as its autoscaler reads them (none for a pool without a provider, or
    with a provider block the master refused)."""
    if not pool.provider:
        return ()
    from controlplane.master.autoscaling.service import scaling_of

    try:
        return scaling_of(pool).shapes
    except ValueError:  # a ConfigError: the autoscaler did not start for it either
        return ()


def pool_shapes(shapes: tuple[Shape, ...], rows: list[Instance]) -> list[PoolShape]:
    """Every configured shape (0 live when none), then the live types the config does not list."""
    live = [r for r in rows if r.state != INSTANCE.TERMINATED]
    out = []
    for sh in shapes:
        mine = [r for r in live if r.instance_type == sh.instance_type]
        out.append(PoolShape(instance_type=sh.instance_type, slots=sh.slots, gpu_model=sh.gpu_model,
                             usd_per_hour=sh.usd_per_hour, spot_usd_per_hour=sh.spot_usd_per_hour,
                             count=len(mine), spot_count=sum(1 for r in mine if r.spot)))
    known = {sh.instance_type for sh in shapes}
    for name in sorted({r.instance_type for r in live} - known):
        mine = [r for r in live if r.instance_type == name]
        entry = lookup(name)
        paid = {r.spot: float(r.price_per_hour or 0.0) for r in mine}
        out.append(PoolShape(instance_type=name, slots=entry.slots if entry else 0,
                             gpu_model=entry.gpu_model if entry else "",
                             usd_per_hour=entry.usd_per_hour if entry else paid.get(False, 0.0),
                             spot_usd_per_hour=entry.spot_usd_per_hour if entry else paid.get(True, 0.0),
                             count=len(mine), spot_count=sum(1 for r in mine if r.spot), configured=False))
    return out


class BlockedOption(msgspec.Struct, rename="camel", kw_only=True):
    """A launch option ruled out until ``until`` (``autoscaler/model.Blocked``)."""

    key: str
    until: float
    reason: str


class LaunchBackoff(msgspec.Struct, rename="camel", kw_only=True):
    failures: int
    last_error: str
    next_attempt_at: float


class ConsolidationMoveJson(msgspec.Struct, rename="camel", kw_only=True):
    """A trial consolidation moved off an underused instance, and why."""

    time: str | None
    trial_id: int
    allocation_id: str
    from_instance: str
    to_agent: str  # where the planner expected it to go
    reason: str


class PoolConsolidation(msgspec.Struct, rename="camel", kw_only=True):
    """Consolidation's settings, its latest moves (newest first, at most 20), how many there were,
    and ``savedUsd``: an estimate, the planner's expected saving (over the moved work's expected
    remaining time, net of the moves' cost) of each drained instance since terminated."""

    enabled: bool
    max_moves_per_trial: int
    move_cost_s: float
    min_runtime_s: float  # onto free slots only trials that have run this long
    moves: list[ConsolidationMoveJson]
    move_count: int
    saved_usd: float


class PoolDescription(msgspec.Struct, rename="camel", kw_only=True):
    """One pool; ``minInstances`` and ``maxInstances`` only where its autoscaler runs."""

    pool: str
    provider: str
    autoscaling: bool
    instances: list[PoolInstance]
    spent_usd: float
    shapes: list[PoolShape]  # its instance types, their prices and live counts
    burn: list[LiveShape]  # its live instances by type, market and price
    burn_usd_per_hour: float  # what they cost together, an hour, now
    plan: list[str]
    blocked: list[BlockedOption]
    last_errors: list[str]
    backoff: LaunchBackoff | None
    min_instances: int | UnsetType = UNSET
    max_instances: int | UnsetType = UNSET
    consolidation: PoolConsolidation | None = None  # where its autoscaler runs


def consolidation_json(scaling: PoolScaling, moves: MoveSummary | None) -> PoolConsolidation:
    c = scaling.consolidation
    latest = [ConsolidationMoveJson(time=iso(m.created_at), trial_id=m.trial_id, allocation_id=m.allocation_id,
                                    from_instance=m.instance_id, to_agent=m.to_agent, reason=m.reason)
              for m in (moves.moves if moves else [])]
    return PoolConsolidation(enabled=c.enabled, max_moves_per_trial=c.max_moves_per_trial, move_cost_s=c.move_cost_s,
                             min_runtime_s=c.min_runtime_s, moves=latest, move_count=moves.count if moves else 0,
                             saved_usd=moves.saved_usd if moves else 0.0)


def describe(rt: MasterRuntime, pool: PoolConfig, rows: list[Instance], now: float,
             moves: MoveSummary | None = None) -> PoolDescription:
    """``moves``: the pool's consolidation moves (``autoscaling/consolidation.summary``)."""
    scaler = rt.autoscaler.pools.get(pool.name) if rt.autoscaler else None
    instances = [PoolInstance(
        id=r.id, state=r.state, instance_type=r.instance_type, zone=r.zone, spot=r.spot,
        launched_at=iso(r.launched_at), terminated_at=iso(r.terminated_at),
        age_seconds=round(epoch(r.terminated_at, now) - epoch(r.launched_at, now), 1),
        agent_id=r.id if r.registered_at else None, connected=r.id in rt.hub.connections,
        cost_usd=round(instance_cost(r, now), 4), reason=r.reason,
    ) for r in rows]
    burn = live_shapes(rows)
    shapes = pool_shapes(scaler.scaling.shapes if scaler is not None else configured_shapes(pool), rows)
    out = PoolDescription(
        pool=pool.name, provider=(pool.provider or {}).get("type", ""), autoscaling=scaler is not None,
        instances=instances, spent_usd=round(sum(i.cost_usd for i in instances), 4), shapes=shapes, burn=burn,
        burn_usd_per_hour=round(sum(sh.price_per_hour * sh.count for sh in burn), 4),
        plan=[], blocked=[], last_errors=[], backoff=None,
    )
    if scaler is not None:
        out.min_instances, out.max_instances = scaler.scaling.min_instances, scaler.scaling.max_instances
        out.consolidation = consolidation_json(scaler.scaling, moves)
        out.plan = list(scaler.last_decision.explanation) if scaler.last_decision else []
        out.blocked = [BlockedOption(key=b.key, until=b.until, reason=b.reason)
                       for b in scaler.blocked if b.until > scaler.last_tick_at]
        out.last_errors = list(scaler.last_errors)
        out.backoff = (LaunchBackoff(failures=scaler.failures.consecutive_failures,
                                     last_error=scaler.failures.last_error,
                                     next_attempt_at=scaler.failures.next_attempt_at)
                       if scaler.failures.consecutive_failures else None)
    return out


def describe_json(rt: MasterRuntime, pool: PoolConfig, rows: list[Instance], now: float,
                  moves: MoveSummary | None = None) -> dict[str, Any]:
    """``describe`` as plain JSON values, keyed as on the wire (the web UI's cluster page reads it)."""
    result: dict[str, Any] = msgspec.to_builtins(describe(rt, pool, rows, now, moves))
    return result
