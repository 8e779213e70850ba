"""Resource pools as Determined's ``v1ResourcePool``: every field its client requires, each truthful.

What this master does not have (Docker images and networks of a Docker agent, a Fluent Bit image,
startup scripts, a master certificate) is the empty value Determined shows for an unset option;
the autoscaling fields come from the pool's ``provider`` block (``autoscaling/service.scaling_of``),
and are 0 for a static pool, as in Determined.
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.autoscaling.service import scaling_of
from controlplane.master.db.models import Instance
from controlplane.master.pools import PoolConfig
from controlplane.master.runtime import MasterRuntime
from controlplane.master.settings import MasterSettings

SCHEDULER_TYPES = {"priority": "SCHEDULER_TYPE_PRIORITY", "fair_share": "SCHEDULER_TYPE_FAIR_SHARE"}
POOL_TYPES = {"ec2": "RESOURCE_POOL_TYPE_AWS", "aws": "RESOURCE_POOL_TYPE_AWS", "gce": "RESOURCE_POOL_TYPE_GCP",
              "gcp": "RESOURCE_POOL_TYPE_GCP"}


class PriorityDetail(msgspec.Struct, rename="camel", kw_only=True):
    default_priority: int
    preemption: bool


class PoolDetail(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    priority_scheduler: PriorityDetail | None = None


class V1ResourcePool(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1ResourcePool`` (33 required fields) plus ``provider``, which this master's
    own CLI shows."""

    name: str
    description: str
    type: str
    num_agents: int
    slots_available: int
    slots_used: int
    slot_type: str
    slots_per_agent: int
    aux_container_capacity: int
    aux_containers_running: int
    default_compute_pool: bool
    default_aux_pool: bool
    preemptible: bool
    min_agents: int
    max_agents: int
    instance_type: str
    master_url: str
    master_cert_name: str
    startup_script: str
    container_startup_script: str
    agent_docker_network: str
    agent_docker_runtime: str
    agent_docker_image: str
    agent_fluent_image: str
    max_idle_agent_period: float
    max_agent_starting_period: float
    details: PoolDetail
    scheduler_type: str
    scheduler_fitting_policy: str
    location: str
    image_id: str
    aux_container_capacity_per_agent: int
    cluster_name: str
    resource_manager_metadata: dict[str, str]
    max_aux_containers_per_agent: int
    provider: str


class PoolUse(msgspec.Struct, kw_only=True):
    """What the pool's live agents hold and run now."""

    agents: int = 0
    slots: int = 0
    slots_used: int = 0
    aux_running: int = 0
    cuda: bool = False
    slots_per_agent: int = 0


def master_url(settings: MasterSettings) -> str:
    return settings.public_url or f"http://{settings.host}:{settings.port}"


def pool_json(settings: MasterSettings, pool: PoolConfig, use: PoolUse) -> V1ResourcePool:
    provider: dict[str, Any] = pool.provider or {}
    kind = str(provider.get("type", "")) if provider else ""
    scaling = scaling_of(pool) if provider else None
    policy = pool.policy
    location = provider.get("zone") or ",".join(provider.get("zones") or []) or provider.get("region", "")
    return V1ResourcePool(
        name=pool.name, description=pool.description, type=POOL_TYPES.get(kind, "RESOURCE_POOL_TYPE_STATIC"),
        num_agents=use.agents, slots_available=use.slots, slots_used=use.slots_used,
        slot_type="TYPE_CUDA" if use.cuda else "TYPE_CPU",
        slots_per_agent=scaling.slots_per_instance if scaling else use.slots_per_agent,
        aux_container_capacity=policy.max_zero_slot_per_agent * use.agents, aux_containers_running=use.aux_running,
        default_compute_pool=pool.name == settings.default_resource_pool,
        default_aux_pool=pool.name == settings.default_aux_pool,
        preemptible=bool(scaling and scaling.spot),
        min_agents=scaling.min_instances if scaling else 0, max_agents=scaling.max_instances if scaling else 0,
        instance_type=",".join(scaling.instance_types) if scaling else "",
        master_url=master_url(settings), master_cert_name="", startup_script="", container_startup_script="",
        agent_docker_network="", agent_docker_runtime="", agent_docker_image="", agent_fluent_image="",
        max_idle_agent_period=scaling.max_idle_agent_period_s if scaling else 0.0,
        max_agent_starting_period=scaling.max_agent_starting_period_s if scaling else 0.0,
        details=PoolDetail(priority_scheduler=PriorityDetail(default_priority=policy.default_priority,
                                                             preemption=policy.preemption)
                           if policy.scheduler == "priority" else None),
        scheduler_type=SCHEDULER_TYPES[policy.scheduler],
        scheduler_fitting_policy=f"FITTING_POLICY_{policy.fitting_policy.upper()}",
        location=str(location), image_id=str(provider.get("image_id") or provider.get("source_image") or ""),
        aux_container_capacity_per_agent=policy.max_zero_slot_per_agent, cluster_name=settings.cluster_name,
        resource_manager_metadata={}, max_aux_containers_per_agent=policy.max_zero_slot_per_agent, provider=kind)


async def instances_of(rt: MasterRuntime, pool_name: str) -> list[Instance]:
    """The pool's cloud instances, oldest launch first (bounded by its max_instances and history kept)."""
    async with rt.sessions() as session:
        return list((await session.scalars(select(Instance).where(Instance.pool == pool_name)
                                           .order_by(Instance.launched_at))).all())


async def recent_instances(session: AsyncSession, pool_name: str, limit: int) -> list[Instance]:
    """Up to ``limit`` of the pool's cloud instances: every live one first, then the most recently
    launched (ties by id)."""
    return list((await session.scalars(
        select(Instance).where(Instance.pool == pool_name)
        .order_by(Instance.terminated_at.is_not(None), Instance.launched_at.desc(), Instance.id)
        .limit(limit))).all())
