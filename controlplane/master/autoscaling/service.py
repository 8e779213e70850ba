"""Builds a reconciler for every pool that has a provider and ticks them in the background."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from controlplane.autoscaler import PoolScaling
from controlplane.config import fields as f
from controlplane.master.autoscaling.reconciler import PoolAutoscaler
from controlplane.master.pools import PoolConfig
from controlplane.master.runtime import MasterRuntime
from controlplane.master.settings import parse_duration

log = logging.getLogger("controlplane.autoscaler")


def scaling_of(pool: PoolConfig) -> PoolScaling:
    """The provider block of a pool (Determined's field names) as the planner's policy."""
    p, path = pool.provider, f"resource_pools[{pool.name}].provider"
    types = p.get("instance_type") or p.get("machine_type") or "default"
    zones = p.get("zones") or ([p["zone"]] if p.get("zone") else [])
    return PoolScaling(
        pool=pool.name, instance_types=tuple([types] if isinstance(types, str) else types), zones=tuple(zones),
        slots_per_instance=f.integer(p.get("slots_per_instance", 1), f"{path}.slots_per_instance", minimum=0),
        spot=bool(p.get("spot") or p.get("provisioning_model", "").upper() == "SPOT"),
        spot_fallback_to_on_demand=bool(p.get("spot_fallback_to_on_demand", False)),
        min_instances=f.integer(p.get("min_instances", 0), f"{path}.min_instances", minimum=0),
        max_instances=f.integer(p.get("max_instances", 5), f"{path}.max_instances", minimum=0),
        max_idle_agent_period_s=parse_duration(p.get("max_idle_agent_period", "10m"), f"{path}.max_idle_agent_period"),
        max_agent_starting_period_s=parse_duration(p.get("max_agent_starting_period", "10m"),
                                                   f"{path}.max_agent_starting_period"),
    )


class AutoscalerService:
    def __init__(self, rt: MasterRuntime, provisioner_for: Callable[[PoolConfig], Any],
                 boot_script: Callable[[str], str], tick_s: float = 5.0) -> None:
        self.rt = rt
        self.tick_s = tick_s
        self.pools: dict[str, PoolAutoscaler] = {}
        for pool in rt.settings.pools:
            if not pool.provider:
                continue
            self.pools[pool.name] = PoolAutoscaler(
                rt=rt, scaling=scaling_of(pool), provisioner=provisioner_for(pool), provider=pool.provider["type"],
                boot_script=boot_script, prices=dict(pool.provider.get("prices") or {}))
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if self.pools:
            self._task = asyncio.create_task(self._loop(), name="autoscaler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        while True:
            for scaler in list(self.pools.values()):
                try:
                    await scaler.tick()
                except asyncio.CancelledError:
                    raise
                except Exception:  # one pool's bad tick must not stop the others
                    log.exception("autoscaler tick for pool %s failed", scaler.pool)
            await asyncio.sleep(self.tick_s)
