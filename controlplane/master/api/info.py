"""GET /info (snake_case, unauthenticated) and GET /api/v1/master."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.authz import Action, opt
from controlplane.version import __version__


@get("/info", operation_id="GetInfo", opt=opt(Action.PUBLIC), tags=["cluster"])
async def get_info(request: Request) -> dict[str, Any]:
    rt = runtime_of(request)
    return {
        "version": __version__,
        "master_id": rt.master_id,
        "cluster_id": rt.cluster_id,
        "cluster_name": rt.settings.cluster_name,
        "telemetry": {"enabled": False},
        "sso_providers": [],
    }


@get("/api/v1/master", operation_id="GetMaster", opt=opt(Action.PUBLIC), tags=["cluster"])
async def get_master(request: Request) -> dict[str, Any]:
    rt = runtime_of(request)
    return {
        "version": __version__,
        "masterId": rt.master_id,
        "clusterId": rt.cluster_id,
        "clusterName": rt.settings.cluster_name,
        "hasCustomLogo": False,
        "strictJobQueueControl": False,
        "rbacEnabled": False,
        "telemetryEnabled": False,
    }
