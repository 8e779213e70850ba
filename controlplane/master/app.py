"""The master's Litestar app, built by ``create_app(settings)``; nothing is read at import time."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from sqlalchemy import select

from controlplane.common.timeutil import utcnow
from controlplane.master.api import routes
from controlplane.master.api.auth_guard import authorize_route
from controlplane.master.db.engine import make_engine, make_sessionmaker
from controlplane.master.db.migrate import upgrade_to_head
from controlplane.master.db.models import ClusterInfo
from controlplane.master.errors import ApiError, error_body
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.auth import ensure_default_users
from controlplane.master.settings import MasterSettings
from controlplane.version import __version__

log = logging.getLogger("controlplane.master")


def _api_error(_: Request, exc: ApiError) -> Response:
    return Response(error_body(exc.message, exc.status), status_code=exc.status)


def _http_error(_: Request, exc: HTTPException) -> Response:
    detail = exc.detail
    extra = getattr(exc, "extra", None)
    if extra and isinstance(extra, list):
        detail = f"{detail}: " + "; ".join(
            (f"{e['key']}: " if e.get("key") else "") + str(e.get("message", e)) if isinstance(e, dict) else str(e)
            for e in extra)
    return Response(error_body(str(detail), exc.status_code), status_code=exc.status_code)


def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return Response(error_body("internal error; the master log has the details", 500), status_code=500)


def _too_deep(request: Request, exc: RecursionError) -> Response:
    """A JSON body nested past the decoder's depth (``[[[[...]]]]``): the caller's input, not a bug."""
    log.warning("refused %s %s: nested too deeply (%s)", request.method, request.url.path, exc)
    message = "request body: nested too deeply"
    return Response(error_body(message, 400), status_code=400)


async def _bootstrap(rt: MasterRuntime) -> None:
    rt.settings.data_dir.mkdir(parents=True, exist_ok=True)
    await upgrade_to_head(rt.engine)
    async with rt.sessions.begin() as session:
        info = await session.scalar(select(ClusterInfo))
        if info is None:
            info = ClusterInfo(id=1, cluster_id=str(uuid.uuid4()), created_at=utcnow())
            session.add(info)
        rt.cluster_id = info.cluster_id
        await ensure_default_users(session)


async def start_runtime(rt: MasterRuntime) -> None:
    """Migrations, cluster identity, default users, then the orchestrator's loop."""
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
    await rt.engine.dispose()


def create_app(settings: MasterSettings) -> Litestar:
    from controlplane.master.orchestration.hub import AgentHub
    from controlplane.master.orchestration.orchestrator import Orchestrator

    engine = make_engine(settings.resolved_db_url())
    rt = MasterRuntime(settings=settings, engine=engine, sessions=make_sessionmaker(engine),
                       master_id=str(uuid.uuid4()))
    rt.hub = AgentHub()
    rt.orchestrator = Orchestrator(rt)
    from controlplane.master.autoscaling import service as autoscaling

    rt.autoscaler = autoscaling.build(rt)
    from controlplane.master.checkpoint_gc.loop import CheckpointGcLoop

    rt.checkpoint_gc = CheckpointGcLoop(rt)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        await start_runtime(rt)
        try:
            yield
        finally:
            await stop_runtime(rt)

    app = Litestar(
        route_handlers=routes.ALL,
        guards=[authorize_route],
        lifespan=[lifespan],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, RecursionError: _too_deep,
                            Exception: _internal_error},
        openapi_config=OpenAPIConfig(title="controlplane master", version=__version__, path="/docs"),
        request_max_body_size=200 * 1024 * 1024,
        debug=False,
    )
    app.state.runtime = rt
    return app
