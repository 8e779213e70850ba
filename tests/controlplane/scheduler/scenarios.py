"""Builders for scheduler scenarios: short names for agents, requests and running work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from controlplane.scheduler.environment import DEFAULT, DEFAULT_IMAGE, Image
from controlplane.scheduler.model import AgentSnapshot, PoolPolicy, Request, Running

NOW = 1_000.0


def agent(agent_id: str, slots: int, used: tuple[int, ...] = (), pool: str = "default", schedulable: bool = True,
          zero: int = 0, envs: tuple[str, ...] = (), slot_type: str = "cpu") -> AgentSnapshot:
    """``envs``: the environments it offers besides ``default``."""
    return AgentSnapshot(agent_id, pool, tuple(range(slots)), frozenset(used), schedulable, zero,
                         frozenset({DEFAULT, *envs}), slot_type)


def req(alloc: str, slots: int, job: str | None = None, priority: int = 42, pool: str = "default",
        submitted: float = 0.0, position: float = 0.0, weight: float = 1.0, max_slots: int | None = None,
        preemptible: bool = True, env: str | Image = DEFAULT_IMAGE) -> Request:
    """``env``: the environment it runs in, one name or an Image (per slot type)."""
    image = Image(env, env, env) if isinstance(env, str) else env
    return Request(alloc, job or alloc, pool, slots, priority, weight, max_slots, position, submitted, preemptible,
                   image)


def group(alloc: str, tasks: Sequence[int], job: str | None = None, priority: int = 42, submitted: float = 0.0,
          position: float = 0.0, weight: float = 1.0, max_slots: int | None = None) -> Request:
    """A task group (an OpenPAI job): one slot count per task; it needs their sum."""
    return replace(req(alloc, sum(tasks), job, priority, submitted=submitted, position=position, weight=weight,
                       max_slots=max_slots), tasks=tuple(tasks))


def running(alloc: str, where: dict[str, tuple[int, ...]], job: str | None = None, priority: int = 42,
            started: float = 0.0, preempting: bool = False, weight: float = 1.0, preemptible: bool = True,
            position: float = 0.0, submitted: float = 0.0) -> Running:
    return Running(alloc, job or alloc, "default", tuple(where.items()), priority, weight, started, preemptible,
                   preempting, queue_position=position, submitted_at=submitted)


def pools(**kw) -> dict[str, PoolPolicy]:
    return {"default": PoolPolicy("default", **kw)}
