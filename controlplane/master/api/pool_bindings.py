"""Determined's workspace ↔ resource-pool bindings, as this master has them: none. Every pool is
available to every workspace, so ``det resource-pool bindings list-workspaces POOL`` lists no
workspace bound to it and a workspace's ``list_pools()`` lists every pool. Binding pools to
workspaces (an enterprise feature of Determined) is not offered: there is nothing to change."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import runtime_of, user_of
from controlplane.master.api.params import MAX_ID, ListLimit, ListOffset
from controlplane.master.authz import Action, opt
from controlplane.master.errors import NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import paging
from controlplane.master.services import workspaces as workspace_svc
from controlplane.master.services.paging import Pagination

PoolName = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00/]+$")]
WorkspaceId = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the workspace's id")]


class WorkspacesBoundResponse(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1ListWorkspacesBoundToRPResponse``."""

    workspace_ids: list[int]
    pagination: Pagination


class PoolsAvailableResponse(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1ListRPsBoundToWorkspaceResponse``."""

    resource_pools: list[str]
    pagination: Pagination


@get("/api/v1/resource-pools/{pool_name:str}/workspace-bindings", operation_id="ListWorkspacesBoundToRP",
     opt=opt(Action.VIEW), tags=["cluster"])
async def workspaces_bound(request: AnyRequest, pool_name: PoolName, limit: ListLimit = 0,
                           offset: ListOffset = 0) -> WorkspacesBoundResponse:
    if runtime_of(request).settings.pool(pool_name) is None:
        raise NotFound(f"resourcePoolName: pool {pool_name!r} not found")
    return WorkspacesBoundResponse(workspace_ids=[], pagination=paging.pagination(offset, limit, 0, 0))


@get("/api/v1/workspaces/{workspace_id:int}/available-resource-pools", operation_id="ListRPsBoundToWorkspace",
     opt=opt(Action.VIEW), tags=["workspaces"])
async def pools_available(request: AnyRequest, workspace_id: WorkspaceId, limit: ListLimit = 0,
                          offset: ListOffset = 0) -> PoolsAvailableResponse:
    user_of(request)
    rt = runtime_of(request)
    async with rt.sessions() as session:
        await workspace_svc.get_workspace(session, workspace_id)  # 404 for none
    names = [pool.name for pool in rt.settings.pools]  # a handful, from master.yaml
    page = names[offset:offset + limit] if limit else names[offset:]
    return PoolsAvailableResponse(resource_pools=page, pagination=paging.pagination(offset, limit, len(names),
                                                                                     len(page)))


ROUTES = [workspaces_bound, pools_available]
