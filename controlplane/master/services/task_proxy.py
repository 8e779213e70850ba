"""Where the master's task proxy sends ``/proxy/{task_id}/...``, and when each task was last used.

A kind of task that serves HTTP (a notebook, a TensorBoard) registers a resolver: given a
session and a task id, it answers the task's ``ProxyTarget`` (who owns it, the address and port
it listens on, the path prefix it serves under) or None when the id is not one of its tasks.
``resolve`` asks the resolvers in the order they were registered; the first answer wins.

``last_activity`` records, per task id, the monotonic time of the last request or WebSocket
frame the proxy passed (in either direction), so an idle-timeout loop can end tasks nobody
uses: ``idle_for(task_id)`` is the seconds since then, None when the proxy never carried any.
It lives in this process's memory (a restarted master starts every task's clock afresh), and
``forget`` drops a task's entry once it has ended.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.errors import NotFound

if TYPE_CHECKING:
    from controlplane.master.runtime import MasterRuntime


@dataclass(frozen=True)
class ProxyTarget:
    """A task's HTTP endpoint: ``http://{host}:{port}{base_path}{rest of the path}``.

    ``base_path`` is prefixed to what follows ``/proxy/{task_id}`` ("" or "/" for none); a task
    told to serve under ``/proxy/{task_id}/`` (Jupyter's ``base_url``, TensorBoard's
    ``--path_prefix``) gets ``base_path=f"/proxy/{task_id}"``."""

    owner_id: int
    host: str
    port: int
    base_path: str = ""

    def path_for(self, rest: str) -> str:
        """The path to request on the task for ``rest`` (what followed ``/proxy/{task_id}``)."""
        if not rest.startswith("/"):
            rest = "/" + rest
        return self.base_path.rstrip("/") + rest


Resolver = Callable[[AsyncSession, str], Awaitable[ProxyTarget | None]]

_RESOLVERS: list[Resolver] = []


def register_resolver(fn: Resolver) -> Resolver:
    """Add a resolver (after those already registered; registering one twice changes nothing).
    Returns ``fn``, so it can be used as a decorator."""
    if fn not in _RESOLVERS:
        _RESOLVERS.append(fn)
    return fn


def unregister_resolver(fn: Resolver) -> None:
    if fn in _RESOLVERS:
        _RESOLVERS.remove(fn)


def resolvers() -> tuple[Resolver, ...]:
    return tuple(_RESOLVERS)


async def resolve(rt: MasterRuntime, task_id: str) -> ProxyTarget:
    """The target of ``task_id``, from the first resolver that knows it; NotFound naming it else."""
    async with rt.sessions() as session:
        for fn in tuple(_RESOLVERS):
            target = await fn(session, task_id)
            if target is not None:
                return target
    raise NotFound(f"task {task_id} not found: no running task serves a proxy under that id")


# ---- activity --------------------------------------------------------------------------------
last_activity: dict[str, float] = {}


def touch(task_id: str, now: float | None = None) -> None:
    """Record traffic for ``task_id`` (a proxied request, a chunk of its answer, a frame)."""
    last_activity[task_id] = time.monotonic() if now is None else now


def idle_for(task_id: str, now: float | None = None) -> float | None:
    """Seconds since the proxy last carried traffic for ``task_id``; None if it never did."""
    last = last_activity.get(task_id)
    if last is None:
        return None
    return max(0.0, (time.monotonic() if now is None else now) - last)


def forget(task_id: str) -> None:
    """Drop a task's activity record (call it when the task ends)."""
    last_activity.pop(task_id, None)
