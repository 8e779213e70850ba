"""Builds a reconciler for every pool that has a provider and ticks them in the background."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from controlplane.autoscaler import Consolidation, PoolScaling
from controlplane.config import fields as f
from controlplane.config.errors import ConfigError, raise_all
from controlplane.master.autoscaling.consolidation import DrainAgent
from controlplane.master.autoscaling.reconciler import PoolAutoscaler
from controlplane.master.autoscaling.shapes import shapes_of
from controlplane.master.background import BackgroundLoop, note_failure
from controlplane.master.db import outage
from controlplane.master.pools import PoolConfig
from controlplane.master.runtime_core import RuntimeCore
from controlplane.master.settings import parse_duration
from provisioners.base import Provisioner

log = logging.getLogger("controlplane.autoscaler")
MIN_TICK_GAP_S = 1.0  # a wake-up for new demand never makes the cloud be listed more often than this
InstanceGone = Callable[[str, str], Awaitable[None]]  # (instance id, why) -> its work re-queued
T = TypeVar("T")


def _collected(errors: list[ConfigError], fn: Callable[..., T], *args: Any, default: T, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, or ``default`` with its ConfigError added to ``errors`` (so that every
    mistake of a block is reported at once)."""
    try:
        return fn(*args, **kwargs)
    except ConfigError as e:
        errors.append(e)
        return default


def scaling_of(pool: PoolConfig) -> PoolScaling:
    """The provider block of a pool (Determined's field names) as the planner's policy; its
    instance types and prices as `shapes.py` reads them. Every mistake of the block is raised at
    once (ConfigErrors), each naming its field."""
    p, path = pool.provider, f"resource_pools[{pool.name}].provider"
    errors: list[ConfigError] = []
    read = functools.partial(_collected, errors)
    shapes = shapes_of(p, path, errors)
    zones = p.get("zones") or ([p["zone"]] if p.get("zone") else [])
    min_instances = read(f.integer, p.get("min_instances", 0), f"{path}.min_instances", minimum=0, default=0)
    max_instances = read(f.integer, p.get("max_instances", 5), f"{path}.max_instances", minimum=0, default=5)
    idle_s = read(parse_duration, p.get("max_idle_agent_period", "10m"), f"{path}.max_idle_agent_period",
                  default=600.0)
    starting_s = read(parse_duration, p.get("max_agent_starting_period", "10m"),
                      f"{path}.max_agent_starting_period", default=600.0)
    consolidation = consolidation_of(p.get("consolidation"), f"{path}.consolidation", errors)
    raise_all(errors)
    try:
        return PoolScaling(
            pool=pool.name, shapes=shapes, zones=tuple(zones),
            spot=bool(p.get("spot") or p.get("provisioning_model", "").upper() == "SPOT"),
            spot_fallback_to_on_demand=bool(p.get("spot_fallback_to_on_demand", False)),
            min_instances=min_instances, max_instances=max_instances,
            max_idle_agent_period_s=idle_s, max_agent_starting_period_s=starting_s, consolidation=consolidation,
        )
    except ValueError as e:  # a rule across fields (min <= max, ...)
        raise ConfigError(path, str(e)) from e


CONSOLIDATION_FIELDS = {"enabled", "max_moves_per_trial", "move_cost", "min_runtime"}


def _block(raw: Any, path: str) -> dict[str, Any]:
    c = f.mapping(raw, path)
    f.no_unknown(c, CONSOLIDATION_FIELDS, path)
    return c


def _nonnegative_duration(value: Any, path: str) -> float:
    seconds = parse_duration(value, path)
    if not 0 <= seconds < float("inf"):
        raise ConfigError(path, f"must be a duration >= 0, got {value!r}")
    return seconds


def consolidation_of(raw: Any, path: str, errors: list[ConfigError]) -> Consolidation:
    """The provider's optional `consolidation: {enabled, max_moves_per_trial, move_cost,
    min_runtime}` (defaults: on, 2 moves per trial, 2m of a moved trial's slots, 3h run before a
    move onto free slots); each mistake is added to ``errors``."""
    default = Consolidation()
    c = _collected(errors, _block, raw, path, default=None)
    if c is None:
        return default
    read = functools.partial(_collected, errors)
    return Consolidation(
        enabled=read(f.boolean, c.get("enabled", default.enabled), f"{path}.enabled", default=default.enabled),
        max_moves_per_trial=read(f.integer, c.get("max_moves_per_trial", default.max_moves_per_trial),
                                 f"{path}.max_moves_per_trial", minimum=0, default=default.max_moves_per_trial),
        move_cost_s=read(_nonnegative_duration, c.get("move_cost", default.move_cost_s), f"{path}.move_cost",
                         default=default.move_cost_s),
        min_runtime_s=read(_nonnegative_duration, c.get("min_runtime", default.min_runtime_s),
                           f"{path}.min_runtime", default=default.min_runtime_s))


def local_agent_command(rt: RuntimeCore) -> Callable[[str, str, str], list[str]]:
    """How the `local` provider starts an agent: this venv's det-agent, the instance id as its id,
    with the slots of the launched type (the pool's largest for a type it does not list)."""
    import sys
    from pathlib import Path

    settings = rt.settings
    token_file = settings.data_dir / "local-agent-join-token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.touch(mode=0o600)
    token_file.chmod(0o600)
    token_file.write_text(settings.join_token)
    agent_bin = str(Path(sys.executable).parent / "det-agent")
    scalings = {p.name: scaling_of(p) for p in settings.pools if p.provider}

    def command(pool: str, instance_id: str, instance_type: str = "") -> list[str]:
        scaling = scalings.get(pool)
        slots = scaling.slots_of(instance_type) if scaling is not None else 1
        typed = ["--instance-type", instance_type] if instance_type else []
        return [agent_bin, "--master", f"http://127.0.0.1:{settings.port}", "--join-token-file", str(token_file),
                "--agent-id", instance_id, "--pool", pool, "--slots", str(slots), "--slot-type", "cpu", *typed,
                "--work-dir", str(settings.data_dir / "local-agents" / instance_id), "--hide", str(settings.data_dir)]

    return command


def build(rt: RuntimeCore, on_instance_gone: InstanceGone,
          drain_agent: DrainAgent | None = None) -> AutoscalerService | None:
    """The autoscaler of the pools that have a provider (None when none has); ``on_instance_gone``
    re-queues the work of an instance that vanished (the orchestrator's ``instance_gone``),
    ``drain_agent`` carries out consolidation's drains (the orchestrator's ``drain_agent``)."""
    if not any(p.provider for p in rt.settings.pools):
        return None
    from agent_image.boot.render import render_boot_script
    from controlplane.master.autoscaling.providers import PROVIDERS, provisioner_for

    command = local_agent_command(rt) if any(p.provider.get("type") == "local" for p in rt.settings.pools) else None
    public_url = rt.settings.public_url or f"http://127.0.0.1:{rt.settings.port}"

    def boot(pool: str) -> str:
        config = rt.settings.pool(pool)
        provider = PROVIDERS.get(str(config.provider.get("type"))) if config is not None else None
        kind = provider.boot_script if provider is not None else "ec2-user-data"
        return render_boot_script(kind, master_url=public_url, join_token=rt.settings.join_token, pool=pool)

    return AutoscalerService(rt, lambda pool: provisioner_for(pool, local_command=command,
                                                               overrides=rt.settings.provisioner_overrides),
                             boot, tick_s=rt.settings.autoscaler_tick_s, on_instance_gone=on_instance_gone,
                             drain_agent=drain_agent)


class AutoscalerService:
    def __init__(self, rt: RuntimeCore, provisioner_for: Callable[[PoolConfig], Provisioner],
                 boot_script: Callable[[str], str], on_instance_gone: InstanceGone, tick_s: float = 5.0,
                 drain_agent: DrainAgent | None = None) -> None:
        self.rt = rt
        self.tick_s = tick_s
        self.pools: dict[str, PoolAutoscaler] = {}
        for pool in rt.settings.pools:
            if not pool.provider:
                continue
            self.pools[pool.name] = PoolAutoscaler(
                rt=rt, scaling=scaling_of(pool), provisioner=provisioner_for(pool), provider=pool.provider["type"],
                boot_script=boot_script,
                on_instance_gone=on_instance_gone, drain_agent=drain_agent)
        # A tick every tick_s, or on new demand but at most every MIN_TICK_GAP_S (bounds cloud API calls).
        self._loop = BackgroundLoop("autoscaler tick", self._tick_pools, log=log, interval_s=tick_s,
                                    health=rt.db_health, run_first=True, min_gap_s=min(MIN_TICK_GAP_S, tick_s))

    def wake(self) -> None:
        """New unplaceable demand: tick now (at most every MIN_TICK_GAP_S) instead of at tick_s."""
        self._loop.wake()

    async def start(self) -> None:
        if self.pools:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _tick_pools(self) -> None:
        """Each pool's tick; one pool's failure does not stop the others. An unreachable database
        is raised after all have had their turn, for the loop to note once."""
        unreachable: Exception | None = None
        for scaler in list(self.pools.values()):
            try:
                await scaler.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one pool's bad tick must not stop the others
                if outage.cause_of(exc) is not None:
                    unreachable = unreachable or exc
                else:
                    note_failure(log, f"autoscaler tick for pool {scaler.pool}", exc, None)
        if unreachable is not None:
            raise unreachable
