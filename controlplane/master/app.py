"""The master's Litestar app, built by ``create_app(settings)``; nothing is read at import time."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from litestar import Litestar, Response
from litestar.exceptions import HTTPException
from litestar.response import Redirect
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from controlplane.common.timeutil import utcnow
from controlplane.master import browser_session as web_session
from controlplane.master.api import docs, routes, task_proxy
from controlplane.master.api.auth_guard import authorize_route
from controlplane.master.db import outage
from controlplane.master.db.engine import describe_error, make_engine, make_sessionmaker
from controlplane.master.db.migrate import upgrade_to_head
from controlplane.master.db.models import ClusterInfo
from controlplane.master.errors import ApiError, Unauthenticated, error_body
from controlplane.master.http_types import AnyRequest
from controlplane.master.log_ring import LogRing
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.auth import ensure_default_users
from controlplane.master.services.workspaces import own_defaults
from controlplane.master.settings import MasterSettings
from controlplane.master.stream_slots import count_requests
from controlplane.master.webui import routes as webui_routes
from controlplane.state.machine import IllegalTransition
from controlplane.version import __version__

log = logging.getLogger("controlplane.master")


def _api_error(request: AnyRequest, exc: ApiError) -> Response[Any]:
    if isinstance(exc, Unauthenticated) and web_session.is_page(request):
        return Redirect(web_session.login_url(request), status_code=303)  # a browser: the sign-in page
    return Response(error_body(exc.message, exc.status), status_code=exc.status)


MAX_BODY_BYTES = 16 * 1024 * 1024  # a request body's default cap; routes that take more name their own
_MISSING = re.compile(r"^Object missing required field `([^`]*)`")
_BODY_DECODE_ERRORS = ("JSON is malformed", "Number out of range", "Expected ", "Object contains", "Input data")


def _wire_name(request: AnyRequest, key: str) -> str:
    """A query parameter's name as the client sends it (``resourcePool``), not the Python one."""
    try:
        param = request.route_handler.parsed_fn_signature.parameters.get(key)
    except Exception:  # noqa: BLE001 - no handler matched: keep Litestar's key
        return key
    kwarg = getattr(param, "kwarg_definition", None)
    return getattr(kwarg, "name", None) or getattr(kwarg, "query", None) or key


def _field_message(request: AnyRequest, e: object) -> str:
    """One of Litestar's validation errors ({message, key, source}) as "field: rule"."""
    if not isinstance(e, dict):
        return str(e)
    key, message, source = e.get("key"), str(e.get("message", "")), e.get("source")
    if source in ("query", "path") and isinstance(key, str):
        key = _wire_name(request, key)
    missing = _MISSING.match(message)
    if missing:  # msgspec: "Object missing required field `name`"
        parent = "" if key in (None, "", "data") else f"{key}."
        return f"{parent}{missing.group(1)}: required"
    if source == "body" and key in (None, "", "data"):
        if message in ("'data'", "data"):
            return "request body: required"
        if message.startswith("Expected `object"):
            got = message.rpartition("got ")[2].strip("`")
            return f"request body: must be a JSON object, got {got}"
        return f"request body: {message}"
    return f"{key}: {message}" if key else message


def _http_error(request: AnyRequest, exc: HTTPException) -> Response[Any]:
    """Litestar's own 4xx (validation, routing): the message names the field, never a traceback."""
    detail = str(exc.detail)
    extra = getattr(exc, "extra", None)
    if extra and isinstance(extra, list):
        detail = "; ".join(_field_message(request, e) for e in extra)
    elif exc.status_code == 400 and detail.startswith(_BODY_DECODE_ERRORS):
        detail = f"request body: {detail}"
    elif exc.status_code == 413:
        limit = request.route_handler.resolve_request_max_body_size()
        detail = f"request body: larger than this route's limit of {limit} bytes"
    return Response(error_body(detail, exc.status_code), status_code=exc.status_code)


def _illegal_transition(request: AnyRequest, exc: IllegalTransition) -> Response[Any]:
    """A state change the state machine does not allow (a race the handler's own check missed)."""
    log.warning("refused %s %s: %s", request.method, request.url.path, exc)
    message = f"state: {exc.machine} is {exc.from_state}; it cannot become {exc.to_state}"
    return Response(error_body(message, 409), status_code=409)


def _unavailable(request: AnyRequest, cause: str) -> Response[Any]:
    """The database is unreachable or the disk full: 503 naming it, and when to try again. The
    runtime's DatabaseHealth logs the outage once, not once per request."""
    request.app.state.runtime.db_health.failed(cause)
    return Response(error_body(cause, 503), status_code=503, headers={"Retry-After": str(outage.RETRY_AFTER_S)})


def _internal_error(request: AnyRequest, exc: Exception) -> Response[Any]:
    cause = outage.cause_of(exc)
    if cause is not None:
        return _unavailable(request, cause)
    if isinstance(exc, DBAPIError):  # its traceback's messages may quote the values bound to the statement
        log.error("internal error on %s %s: %s", request.method, request.url.path, describe_error(exc))
    else:
        log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return Response(error_body("internal error; the master log has the details", 500), status_code=500)


def _too_deep(request: AnyRequest, exc: RecursionError) -> Response[Any]:
    """A JSON body nested past the decoder's depth (``[[[[...]]]]``): the caller's input, not a bug."""
    log.warning("refused %s %s: nested too deeply (%s)", request.method, request.url.path, exc)
    message = "request body: nested too deeply"
    return Response(error_body(message, 400), status_code=400)


async def _bootstrap(rt: MasterRuntime) -> None:
    from controlplane.master.file_modes import private_dir, private_sqlite_files

    private_dir(rt.settings.data_dir)  # 0700: it holds secrets
    private_sqlite_files(rt.settings.resolved_db_url())  # 0600 before SQLite first opens it
    await upgrade_to_head(rt.engine)
    async with rt.sessions.begin() as session:
        info = await session.scalar(select(ClusterInfo))
        if info is None:
            info = ClusterInfo(id=1, cluster_id=str(uuid.uuid4()), created_at=utcnow())
            session.add(info)
        rt.cluster_id = info.cluster_id
        await ensure_default_users(session, rt.settings.initial_user_password)
        await own_defaults(session)


async def start_runtime(rt: MasterRuntime) -> None:
    """Migrations, cluster identity, default users, then the orchestrator's loop."""
    if rt.log_ring is not None:
        rt.log_ring.install()
    await _bootstrap(rt)
    await rt.orchestrator.start()
    if rt.autoscaler is not None:
        await rt.autoscaler.start()
    await rt.checkpoint_gc.start()
    log.info("master %s up: cluster %s, db %s", __version__, rt.cluster_id, rt.engine.url.render_as_string())


async def stop_runtime(rt: MasterRuntime) -> None:
    await rt.checkpoint_gc.stop()
    if rt.autoscaler is not None:
        await rt.autoscaler.stop()
    await rt.orchestrator.stop()
    await rt.metric_writer.stop()
    await rt.engine.dispose()
    if rt.log_ring is not None:
        rt.log_ring.uninstall()


# Database drivers and SQLAlchemy log every statement with its parameters (DEBUG, INFO): stored
# configs, their secrets included. The master lets them write warnings only.
SQL_LOGGERS = ("aiosqlite", "asyncpg", "sqlalchemy.engine", "sqlalchemy.pool")


def _quiet_sql_loggers() -> None:
    for name in SQL_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logging.WARNING, logger.level))


def build_runtime(settings: MasterSettings) -> MasterRuntime:
    """Everything the master runs (database engine, orchestrator, autoscaler, loops), not started."""
    from controlplane.master.agent_hub import AgentHub
    from controlplane.master.orchestration.orchestrator import Orchestrator

    engine = make_engine(settings.resolved_db_url())
    rt = MasterRuntime(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                       master_id=str(uuid.uuid4()))
    rt.hub = AgentHub()
    if engine.dialect.name == "sqlite" and engine.url.database:  # a full disk is over once it has room again
        rt.db_health.has_space = outage.free_space_check(str(Path(engine.url.database).parent))
    rt.log_ring = LogRing(secrets=(settings.join_token,))
    rt.orchestrator = Orchestrator(rt)
    from controlplane.master.autoscaling import service as autoscaling

    # The parts meet here only: each gets what it needs of another as a callback.
    rt.autoscaler = autoscaling.build(rt, on_instance_gone=rt.orchestrator.instance_gone,
                                      drain_agent=rt.orchestrator.drain_agent)
    if rt.autoscaler is not None:
        rt.orchestrator.on_unplaced = rt.autoscaler.wake
    from controlplane.master.checkpoint_gc.loop import CheckpointGcLoop

    rt.checkpoint_gc = CheckpointGcLoop(rt)
    from controlplane.master.services.metric_writer import MetricWriter, writers_for

    rt.metric_writer = MetricWriter(rt.sessions, writers=writers_for(engine.dialect.name))
    from controlplane.master.services.commands import notebook_target

    rt.proxy.add_resolver(notebook_target)  # notebooks' and TensorBoards' web servers, behind /proxy/<id>/
    return rt


def create_app(settings: MasterSettings) -> Litestar:
    """The app over a new runtime. Handlers reach the runtime through ``app.state.runtime`` only, so
    one app (whose routing and signature models cost most of its start) can serve another runtime."""
    _quiet_sql_loggers()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        rt = app.state.runtime
        await start_runtime(rt)
        try:
            yield
        finally:
            await task_proxy.close_client(app)
            await stop_runtime(rt)

    app = Litestar(
        route_handlers=[*routes.ALL, *docs.asset_routers(), *webui_routes.all_routes()],
        guards=[authorize_route],
        lifespan=[lifespan],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, RecursionError: _too_deep,
                            IllegalTransition: _illegal_transition,
                            Exception: _internal_error},
        openapi_config=docs.openapi_config("controlplane master", __version__),
        request_max_body_size=MAX_BODY_BYTES,  # refused with 413 before it is read; some routes allow more
        middleware=[count_requests],  # streams give way while other requests run (stream_slots.py)
        debug=False,
    )
    app.state.runtime = build_runtime(settings)
    return app


def create_proxy_app(rt: MasterRuntime) -> Litestar:
    """The task proxy's own listener over ``rt`` (another origin than the API's): ``/proxy/...``
    and nothing else. Its handlers sign callers in themselves; the master's app owns the runtime."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await task_proxy.close_client(app)

    app = Litestar(
        route_handlers=task_proxy.PROXY_ROUTES,
        guards=[authorize_route],
        lifespan=[lifespan],
        exception_handlers={ApiError: lambda _, exc: Response(error_body(exc.message, exc.status),
                                                              status_code=exc.status),
                            HTTPException: _http_error, Exception: _internal_error},
        openapi_config=None,
        request_max_body_size=None,
        debug=False,
    )
    app.state.runtime = rt
    return app
