"""GET /info (snake_case, unauthenticated), GET /api/v1/master, and (admins) the master's
effective config and its recent log lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from litestar import get
from litestar.params import Parameter
from litestar.response import Stream

from controlplane.master import log_ring
from controlplane.master.api.auth_guard import runtime_of, user_of
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services.master_config import effective_config
from controlplane.version import __version__


class Telemetry(msgspec.Struct, kw_only=True):
    enabled: bool


class InfoResponse(msgspec.Struct, kw_only=True):
    """``/info``: snake_case keys, as Determined's."""

    version: str
    master_id: str
    cluster_id: str
    cluster_name: str
    telemetry: Telemetry
    sso_providers: list[dict[str, Any]]  # none: no SSO


@get("/info", operation_id="GetInfo", opt=opt(Action.PUBLIC), tags=["cluster"])
async def get_info(request: AnyRequest) -> InfoResponse:
    rt = runtime_of(request)
    return InfoResponse(
        version=__version__,
        master_id=rt.master_id,
        cluster_id=rt.cluster_id,
        cluster_name=rt.settings.cluster_name,
        telemetry=Telemetry(enabled=False),
        sso_providers=[],
    )


class GetMasterResponse(msgspec.Struct, rename="camel", kw_only=True):
    version: str
    master_id: str
    cluster_id: str
    cluster_name: str
    has_custom_logo: bool
    strict_job_queue_control: bool
    rbac_enabled: bool
    telemetry_enabled: bool


@get("/api/v1/master", operation_id="GetMaster", opt=opt(Action.PUBLIC), tags=["cluster"])
async def get_master(request: AnyRequest) -> GetMasterResponse:
    rt = runtime_of(request)
    return GetMasterResponse(
        version=__version__,
        master_id=rt.master_id,
        cluster_id=rt.cluster_id,
        cluster_name=rt.settings.cluster_name,
        has_custom_logo=False,
        strict_job_queue_control=False,
        rbac_enabled=False,
        telemetry_enabled=False,
    )


class MasterConfigResponse(msgspec.Struct, rename="camel", kw_only=True):
    config: dict[str, Any]


@get("/api/v1/master/config", operation_id="GetMasterConfig", opt=opt(Action.ADMINISTER), tags=["cluster"])
async def get_master_config(request: AnyRequest) -> MasterConfigResponse:
    """The effective configuration, every secret masked (``services/master_config.py``)."""
    return MasterConfigResponse(config=effective_config(runtime_of(request).settings))


class V1LogEntry(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    timestamp: str
    level: str
    message: str


MAX_LOG_PAGE = 1000
LogOffset = Annotated[int, Parameter(ge=-log_ring.CAPACITY, le=log_ring.CAPACITY,
                                     description="lines to skip; negative: the last -offset lines")]
LogLimit = Annotated[int, Parameter(ge=0, le=MAX_LOG_PAGE, description=f"lines; 0: at most {MAX_LOG_PAGE}")]


@get("/api/v1/master/logs", operation_id="MasterLogs", opt=opt(Action.ADMINISTER), tags=["cluster"])
async def master_logs(request: AnyRequest, offset: LogOffset = 0, limit: LogLimit = 0,
                      follow: bool = False) -> Stream:
    """The master's recent log lines as Determined's stream (NDJSON ``{"result": {"logEntry": ...}}``),
    from the in-memory ring (``log_ring.py``). ``follow`` is accepted but the stream ends with the
    lines kept now: a bounded answer, never an open-ended one."""
    user_of(request)
    ring = runtime_of(request).log_ring
    entries, _ = ring.read(offset, limit or MAX_LOG_PAGE) if ring is not None else ([], 0)
    lines = [msgspec.json.encode({"result": {"logEntry": V1LogEntry(id=e.id, timestamp=e.timestamp, level=e.level,
                                                                    message=e.message)}}) + b"\n" for e in entries]

    async def chunks() -> AsyncIterator[bytes]:
        for line in lines:
            yield line

    return Stream(chunks(), media_type="application/x-ndjson")
