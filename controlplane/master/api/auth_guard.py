"""Who is calling: a user (Authorization: Bearer) or a task (allocation session token).

A task token is good only for its own allocation's endpoints (its trial's metrics, progress,
checkpoints, logs, preemption, context); everything else needs a user token.
"""

from __future__ import annotations

from dataclasses import dataclass

from litestar import Request
from sqlalchemy import select

from controlplane.master.db.models import Allocation
from controlplane.master.errors import Forbidden, Unauthenticated
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.auth import AuthedUser, token_hash, user_for_token
from controlplane.master.services.token_cache import TASK_TOKENS, USER_TOKENS
from controlplane.state import allocation as A

ALLOCATION_HEADER = "grpc-metadata-x-allocation-token"


@dataclass(frozen=True)
class TaskPrincipal:
    allocation_id: str
    task_id: str
    trial_id: int | None


def bearer_token(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def runtime_of(request: Request) -> MasterRuntime:
    return request.app.state.runtime




async def current_user(request: Request) -> AuthedUser:
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise Unauthenticated("missing or malformed Authorization: Bearer token")
    key = token_hash(token)
    user = USER_TOKENS.get(key)
    if user is None:
        rt = runtime_of(request)
        async with rt.sessions() as session:
            user = await user_for_token(session, token)
        if user is None:
            raise Unauthenticated("invalid or expired token")
        USER_TOKENS.put(key, user)
    return user


async def current_task(request: Request) -> TaskPrincipal | None:
    token = bearer_token(request.headers.get(ALLOCATION_HEADER))
    if token is None:
        return None
    key = token_hash(token)
    cached = TASK_TOKENS.get(key)
    if cached is not None:
        return cached
    rt = runtime_of(request)
    async with rt.sessions() as session:
        row = (await session.execute(
            select(Allocation.id, Allocation.task_id, Allocation.trial_id, Allocation.state)
            .where(Allocation.token_hash == token_hash(token))
        )).first()
    if row is None:
        raise Unauthenticated("invalid allocation token")
    if row[3] == A.TERMINATED:
        # A process that outlived its allocation (its agent was declared lost) must not
        # report into a trial that now runs elsewhere.
        raise Unauthenticated(f"allocation {row[0]} has ended; its token is no longer valid")
    principal = TaskPrincipal(row[0], row[1], row[2])
    TASK_TOKENS.put(key, principal)
    return principal


async def user_or_task(request: Request) -> AuthedUser | TaskPrincipal:
    task = await current_task(request)
    if task is not None:
        return task
    return await current_user(request)


def require_trial(principal: AuthedUser | TaskPrincipal, trial_id: int) -> None:
    if isinstance(principal, TaskPrincipal) and principal.trial_id != trial_id:
        raise Forbidden(f"this allocation token is not valid for trial {trial_id}")


def require_allocation(principal: AuthedUser | TaskPrincipal, allocation_id: str) -> None:
    if isinstance(principal, TaskPrincipal) and principal.allocation_id != allocation_id:
        raise Forbidden(f"this allocation token is not valid for allocation {allocation_id}")


def require_task(principal: AuthedUser | TaskPrincipal, task_id: str) -> None:
    if isinstance(principal, TaskPrincipal) and principal.task_id != task_id:
        raise Forbidden(f"this allocation token is not valid for task {task_id}")
