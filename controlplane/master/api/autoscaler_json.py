"""`det resource-pool describe`: a pool's instances, cost, plan and reasons, as JSON."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from controlplane.common.timeutil import epoch, iso
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


class PoolShape(msgspec.Struct, rename="camel", kw_only=True):
    """How many live instances of one type and market the pool has, and what each costs an hour."""

    instance_type: str
    spot: bool
    price_per_hour: float
    count: int


def live_shapes(rows: list[Instance]) -> list[PoolShape]:
    """The pool's live (not terminated) instances by type, market and price: what it burns now."""
    counts: dict[tuple[str, bool, float], int] = {}
    for r in rows:
        if r.state != INSTANCE.TERMINATED:  # the reconciler's rule: live until it moves the row
            key = (r.instance_type, r.spot, float(r.price_per_hour or 0.0))
            counts[key] = counts.get(key, 0) + 1
    return [PoolShape(instance_type=t, spot=spot, price_per_hour=price, count=n)
            for (t, spot, price), n in sorted(counts.items())]


class BlockedOption(msgspec.Struct, rename="camel", kw_only=True):
    """A launch option ruled out until ``until`` (``autoscaler/model.Blocked``)."""

    key: str
    until: float
    reason: str


class LaunchBackoff(msgspec.Struct, rename="camel", kw_only=True):
    failures: int
    last_error: str
    next_attempt_at: float


class PoolDescription(msgspec.Struct, rename="camel", kw_only=True):
    """One pool; ``minInstances`` and ``maxInstances`` only where its autoscaler runs."""

    pool: str
    provider: str
    autoscaling: bool
    instances: list[PoolInstance]
    spent_usd: float
    shapes: list[PoolShape]  # its live instances by type and market
    burn_usd_per_hour: float  # what they cost together, an hour, now
    plan: list[str]
    blocked: list[BlockedOption]
    last_errors: list[str]
    backoff: LaunchBackoff | None
    min_instances: int | UnsetType = UNSET
    max_instances: int | UnsetType = UNSET


def describe(rt: MasterRuntime, pool: PoolConfig, rows: list[Instance], now: float) -> PoolDescription:
    scaler = rt.autoscaler.pools.get(pool.name) if rt.autoscaler else None
    instances = [PoolInstance(
        id=r.id, state=r.state, instance_type=r.instance_type, zone=r.zone, spot=r.spot,
        launched_at=iso(r.launched_at), terminated_at=iso(r.terminated_at),
        age_seconds=round(epoch(r.terminated_at, now) - epoch(r.launched_at, now), 1),
        agent_id=r.id if r.registered_at else None, connected=r.id in rt.hub.connections,
        cost_usd=round(instance_cost(r, now), 4), reason=r.reason,
    ) for r in rows]
    shapes = live_shapes(rows)
    out = PoolDescription(
        pool=pool.name, provider=(pool.provider or {}).get("type", ""), autoscaling=scaler is not None,
        instances=instances, spent_usd=round(sum(i.cost_usd for i in instances), 4), shapes=shapes,
        burn_usd_per_hour=round(sum(sh.price_per_hour * sh.count for sh in shapes), 4),
        plan=[], blocked=[], last_errors=[], backoff=None,
    )
    if scaler is not None:
        out.min_instances, out.max_instances = scaler.scaling.min_instances, scaler.scaling.max_instances
        out.plan = list(scaler.last_decision.explanation) if scaler.last_decision else []
        out.blocked = [BlockedOption(key=b.key, until=b.until, reason=b.reason)
                       for b in scaler.blocked if b.until > scaler.last_tick_at]
        out.last_errors = list(scaler.last_errors)
        out.backoff = (LaunchBackoff(failures=scaler.failures.consecutive_failures,
                                     last_error=scaler.failures.last_error,
                                     next_attempt_at=scaler.failures.next_attempt_at)
                       if scaler.failures.consecutive_failures else None)
    return out


def describe_json(rt: MasterRuntime, pool: PoolConfig, rows: list[Instance], now: float) -> dict[str, Any]:
    """``describe`` as plain JSON values, keyed as on the wire (the web UI's cluster page reads it)."""
    result: dict[str, Any] = msgspec.to_builtins(describe(rt, pool, rows, now))
    return result
