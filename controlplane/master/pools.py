"""Resource pools from master.yaml: names, descriptions and scheduling policy, validated.

Determined's field names: `resource_pools: [{pool_name, description, scheduler: {type,
preemption, default_priority, fitting_policy}, max_aux_containers_per_agent}]`, with the
cluster-wide default scheduler under `resource_manager.scheduler` and the default pools under
`resource_manager.default_compute_resource_pool` / `default_aux_resource_pool` (or the
top-level `default_compute_pool` / `default_aux_pool`). A pool's
`task_container_defaults.preemption_timeout` (Determined's: seconds) is how long its trials get to
checkpoint and exit once asked; an experiment's own `preemption_timeout` wins over it if shorter
(a longer one is refused at create: a user may not hold a pool's slots longer than its admin
allows), and it wins over the master's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.config import fields as f
from controlplane.config.errors import ConfigError
from controlplane.config.limits import INT32_MAX
from controlplane.scheduler.model import DEFAULT_PRIORITY, PoolPolicy

SCHEDULERS = ("priority", "fair_share")
FITTING = ("best", "worst")


@dataclass(frozen=True)
class PoolConfig:
    name: str
    description: str
    policy: PoolPolicy
    provider: dict[str, Any] = field(default_factory=dict)  # autoscaling, when the pool has one
    # task_container_defaults.preemption_timeout; None: the master's applies.
    preemption_timeout_s: float | None = None


def preemption_timeout(value: Any, path: str) -> float:
    """Determined's `preemption_timeout`: whole seconds (a duration such as '30m' is also taken)."""
    seconds = f.duration(value, path)
    if not 0 <= seconds <= INT32_MAX:
        raise ConfigError(path, f"must be 0 to {INT32_MAX} seconds, got {value!r}")
    return seconds


def _pool_preemption_timeout(raw: dict[str, Any], path: str) -> float | None:
    tcd_path = f.join(path, "task_container_defaults")
    value = f.mapping(raw.get("task_container_defaults"), tcd_path).get("preemption_timeout")
    return None if value is None else preemption_timeout(value, f.join(tcd_path, "preemption_timeout"))


def _policy(name: str, raw: dict[str, Any], defaults: dict[str, Any], path: str) -> PoolPolicy:
    sched = {**defaults, **f.mapping(raw.get("scheduler"), f.join(path, "scheduler"))}
    spath = f.join(path, "scheduler")
    f.no_unknown(sched, {"type", "preemption", "default_priority", "fitting_policy", "allow_heterogeneous_fits"},
                 spath)
    kind = sched.get("type", "priority")
    if kind == "round_robin":
        kind = "priority"  # Determined's deprecated name for the same queue order
    if kind not in SCHEDULERS:
        raise ConfigError(f.join(spath, "type"), f"must be one of {', '.join(SCHEDULERS)}, got {kind!r}")
    fitting = sched.get("fitting_policy", "best")
    if fitting not in FITTING:
        raise ConfigError(f.join(spath, "fitting_policy"), f"must be best or worst, got {fitting!r}")
    return PoolPolicy(
        name=name, scheduler=kind,
        preemption=f.boolean(sched.get("preemption", True), f.join(spath, "preemption")),
        default_priority=f.integer(sched.get("default_priority", DEFAULT_PRIORITY), f.join(spath, "default_priority"),
                                   minimum=1, maximum=99),
        fitting_policy=fitting,
        max_zero_slot_per_agent=f.integer(raw.get("max_aux_containers_per_agent", 100),
                                          f.join(path, "max_aux_containers_per_agent"), minimum=0),
    )


def parse_pools(raw_pools: Any, resource_manager: Any) -> tuple[list[PoolConfig], str, str]:
    """(pools, default compute pool, default aux pool)."""
    rm = f.mapping(resource_manager, "resource_manager")
    defaults = f.mapping(rm.get("scheduler"), "resource_manager.scheduler")
    if raw_pools is None:
        raw_pools = [{"pool_name": "default"}]
    if not isinstance(raw_pools, list) or not raw_pools:
        raise ConfigError("resource_pools", "must be a non-empty list of pools")
    pools: list[PoolConfig] = []
    for i, raw in enumerate(raw_pools):
        path = f"resource_pools[{i}]"
        raw = f.mapping(raw, path)
        f.no_unknown(raw, {"pool_name", "description", "scheduler", "max_aux_containers_per_agent", "provider",
                           "agent_reattach_enabled", "agent_reconnect_wait", "task_container_defaults"}, path)
        name = f.string(f.get(raw, "pool_name", path), f.join(path, "pool_name"))
        if not name or any(p.name == name for p in pools):
            raise ConfigError(f.join(path, "pool_name"), f"must be a unique, non-empty name, got {name!r}")
        pools.append(PoolConfig(name=name, description=str(raw.get("description") or ""),
                                policy=_policy(name, raw, defaults, path),
                                provider=f.mapping(raw.get("provider"), f.join(path, "provider")),
                                preemption_timeout_s=_pool_preemption_timeout(raw, path)))
    names = [p.name for p in pools]
    compute = rm.get("default_compute_resource_pool") or names[0]
    aux = rm.get("default_aux_resource_pool") or compute
    for key, value in (("default_compute_resource_pool", compute), ("default_aux_resource_pool", aux)):
        if value not in names:
            raise ConfigError(f"resource_manager.{key}", f"unknown pool {value!r} (pools: {', '.join(names)})")
    return pools, compute, aux
