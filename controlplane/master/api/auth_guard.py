"""Who is calling, and may they: the guard every route passes through.

A user signs in with ``Authorization: Bearer`` (or, in a browser, the web UI's session cookie,
which needs a CSRF token on every request that changes state); a task carries its allocation's
session token.
Each route names its ``authz.Action`` in ``opt``; ``authorize_route`` authenticates, applies the
role part of ``authz.TABLE`` and, for a task token, the route's ``task_scope`` (the path
parameter that must be the task's own trial, allocation or task). A route without an action is
refused: authorization fails closed.
"""

from __future__ import annotations

from typing import Any

from litestar.handlers import BaseRouteHandler

from controlplane.master import browser_session as webui_session
from controlplane.master.authz import UNAUTHENTICATED, Action, Rule, check_role, rule_for
from controlplane.master.errors import Forbidden, Unauthenticated
from controlplane.master.http_types import AnyConnection
from controlplane.master.principals import AuthedUser, Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.auth import task_token_row, user_for_token
from controlplane.master.token_cache import token_hash
from controlplane.state import allocation as A

ALLOCATION_HEADER = "grpc-metadata-x-allocation-token"


def bearer_token(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def runtime_of(request: AnyConnection) -> MasterRuntime:
    return request.app.state.runtime


async def current_user(request: AnyConnection) -> AuthedUser:
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        return await cookie_user(request)
    return await user_for(request, token)


async def cookie_user(request: AnyConnection) -> AuthedUser:
    """The user of the session cookie. A task's page on the same site can toss in cookies of the
    same name (``browser_session.cookie_values``): of several values, the live sessions count
    (for a request that changes state, those its CSRF token was made for); junk is skipped, so it
    locks nobody out, and sessions of two different users sign nobody in (the page may have tossed
    in its owner's own token to have this browser act as them) until the person signs in again,
    which ends them all. The token used is recorded for the page (``browser_session.cookie_token``)."""
    tokens = webui_session.cookie_tokens(request)
    if not tokens:
        raise Unauthenticated("missing or malformed Authorization: Bearer token")
    if request.scope.get("method") not in webui_session.SAFE_METHODS:
        tokens = [t for t in tokens if webui_session.csrf_ok(request, t)]
        if not tokens:
            raise Forbidden("a request signed in by the session cookie needs its X-CSRF-Token header")
    live: list[tuple[str, AuthedUser]] = []
    for token in tokens:
        try:
            live.append((token, await user_for(request, token)))
        except Unauthenticated:
            continue
    if not live:
        raise Unauthenticated("invalid or expired token")
    if len({user.id for _, user in live}) > 1:
        raise Unauthenticated("this browser sends sessions of several users in its cookies (a page of another "
                              "site may have set one): sign in again")
    token, user = live[0]
    setattr(request.state, webui_session.SIGNED_IN_STATE, token)
    return user


async def user_for(connection: AnyConnection, token: str) -> AuthedUser:
    """The signed-in user a user token names (cached), or 401."""
    key = token_hash(token)
    rt = runtime_of(connection)
    user = rt.tokens.users.get(key)
    if user is None:
        async with rt.sessions() as session:
            user = await user_for_token(session, token)
        if user is None:
            raise Unauthenticated("invalid or expired token")
        rt.tokens.users.put(key, user)
    return user


async def current_task(request: AnyConnection) -> TaskPrincipal | None:
    token = bearer_token(request.headers.get(ALLOCATION_HEADER))
    if token is None:
        return None
    key = token_hash(token)
    rt = runtime_of(request)
    cached = rt.tokens.tasks.get(key)
    if cached is not None:
        return cached
    async with rt.sessions() as session:
        row = await task_token_row(session, key)
    if row is None:
        raise Unauthenticated("invalid allocation token")
    alloc_id, task_id, trial_id, state, trial_run = row
    if state == A.TERMINATED:
        # A process that outlived its allocation (its agent was declared lost) must not
        # report into a trial that now runs elsewhere.
        raise Unauthenticated(f"allocation {alloc_id} has ended; its token is no longer valid")
    run_id = run_id_of(alloc_id)
    if trial_id is not None and trial_run is not None and run_id != trial_run:
        # Fencing: only the trial's current run may act for it, so two copies never both write.
        raise Unauthenticated(f"allocation {alloc_id} is run {run_id} of trial {trial_id}, "
                              f"which has moved on to run {trial_run}; its token is no longer valid")
    principal = TaskPrincipal(alloc_id, task_id, trial_id, run_id)
    rt.tokens.tasks.put(key, principal)
    return principal


def run_id_of(allocation_id: str) -> int:
    """Allocation ids are "<task_id>.<run_id>"."""
    tail = allocation_id.rpartition(".")[2]
    return int(tail) if tail.isdigit() else 0


async def user_or_task(request: AnyConnection) -> AuthedUser | TaskPrincipal:
    task = await current_task(request)
    if task is not None:
        return task
    return await current_user(request)


def require_trial(principal: AuthedUser | TaskPrincipal, trial_id: int) -> None:
    if isinstance(principal, TaskPrincipal) and principal.trial_id != trial_id:
        raise Forbidden(f"this allocation token is not valid for trial {trial_id}")


def require_task(principal: AuthedUser | TaskPrincipal, task_id: str) -> None:
    if isinstance(principal, TaskPrincipal) and principal.task_id != task_id:
        raise Forbidden(f"this allocation token is not valid for task {task_id}")


# What a task token's ``task_scope`` names: the principal's attribute a path parameter must match.
_SCOPES = {"trial": "trial_id", "allocation": "allocation_id", "task": "task_id"}


def route_action(handler: BaseRouteHandler) -> Action | None:
    action = (handler.opt or {}).get("action")
    return action if isinstance(action, Action) else None


async def authorize_route(connection: AnyConnection, handler: BaseRouteHandler) -> None:
    """Litestar guard for every route: authenticate, then the role part of the table."""
    action = route_action(handler)
    if action is None:
        if _is_docs(connection) or connection.scope.get("method") == "OPTIONS":
            return  # the docs page and Litestar's automatic OPTIONS answers carry no data
        raise Forbidden(f"route {connection.url.path} has no authorization rule")
    if action in UNAUTHENTICATED:
        return
    principal: Principal = await user_or_task(connection)
    check_role(principal, action)
    if isinstance(principal, TaskPrincipal) and rule_for(principal, action) is Rule.OWN_TASK:
        _check_task_scope(principal, handler, connection.path_params)
    connection.state.principal = principal


def _check_task_scope(task: TaskPrincipal, handler: BaseRouteHandler, params: dict[str, Any]) -> None:
    scope = (handler.opt or {}).get("task_scope")
    if scope is None:
        raise Forbidden("a task token is not valid for this route")
    if scope == "body":
        return  # the handler checks the ids in the body with require_trial / require_task
    kind, param = scope
    want = getattr(task, _SCOPES[kind])
    got = params.get(param)
    if str(got) != str(want):
        raise Forbidden(f"this allocation token is not valid for {kind} {got}")


def _is_docs(connection: AnyConnection) -> bool:
    """The OpenAPI schema and its docs page (served under /docs by Litestar's plugin)."""
    path = connection.url.path
    return path == "/docs" or path.startswith("/docs/")


def principal_of(request: AnyConnection) -> Principal:
    """The caller the guard authenticated for this request."""
    return request.state.principal


def user_of(request: AnyConnection) -> AuthedUser:
    principal = principal_of(request)
    if not isinstance(principal, AuthedUser):
        raise Forbidden("this route needs a user token, not a task token")
    return principal
