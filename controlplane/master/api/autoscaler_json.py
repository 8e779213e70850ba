"""`det resource-pool describe`: a pool's instances, cost, plan and reasons, as JSON."""

from __future__ import annotations

from typing import Any

from controlplane.common.timeutil import epoch, iso
from controlplane.master.db.models import Instance
from controlplane.master.pools import PoolConfig
from controlplane.master.runtime import MasterRuntime


def instance_cost(row: Instance, now: float) -> float:
    """Per-second billing: instance-seconds from launch to termination (or now) × price."""
    start = epoch(row.launched_at, now)
    end = epoch(row.terminated_at, now)
    return max(0.0, end - start) * row.price_per_hour / 3600.0


def describe_json(rt: MasterRuntime, pool: PoolConfig, rows: list[Instance], now: float) -> dict[str, Any]:
    scaler = rt.autoscaler.pools.get(pool.name) if rt.autoscaler else None
    instances: list[dict[str, Any]] = [{
        "id": r.id, "state": r.state, "instanceType": r.instance_type, "zone": r.zone, "spot": r.spot,
        "launchedAt": iso(r.launched_at), "terminatedAt": iso(r.terminated_at),
        "ageSeconds": round(epoch(r.terminated_at, now) - epoch(r.launched_at, now), 1),
        "agentId": r.id if r.registered_at else None, "connected": r.id in rt.hub.connections,
        "costUsd": round(instance_cost(r, now), 4), "reason": r.reason,
    } for r in rows]
    out: dict[str, Any] = {
        "pool": pool.name, "provider": (pool.provider or {}).get("type", ""), "autoscaling": scaler is not None,
        "instances": instances, "spentUsd": round(sum(i["costUsd"] for i in instances), 4),
        "plan": [], "blocked": [], "lastErrors": [], "backoff": None,
    }
    if scaler is not None:
        out.update({
            "minInstances": scaler.scaling.min_instances, "maxInstances": scaler.scaling.max_instances,
            "plan": list(scaler.last_decision.explanation) if scaler.last_decision else [],
            "blocked": [{"key": b.key, "until": b.until, "reason": b.reason}
                        for b in scaler.blocked if b.until > scaler.last_tick_at],
            "lastErrors": list(scaler.last_errors),
            "backoff": ({"failures": scaler.failures.consecutive_failures, "lastError": scaler.failures.last_error,
                         "nextAttemptAt": scaler.failures.next_attempt_at}
                        if scaler.failures.consecutive_failures else None),
        })
    return out
