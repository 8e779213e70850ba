"""``GET /api/v1/workspaces``: the one workspace, for Determined's client (``det template list`` asks)."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, get
from litestar.params import QueryParameter

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ListLimit, ListOffset, QueryText
from controlplane.master.authz import Action, opt
from controlplane.master.services import workspaces as svc

ExactName = Annotated[str | None, QueryParameter(name="nameCaseSensitive", max_length=255, pattern=r"^[^\x00]*$")]


@get("/api/v1/workspaces", operation_id="GetWorkspaces", opt=opt(Action.VIEW), tags=["workspaces"])
async def list_workspaces(request: Request, limit: ListLimit = 0, offset: ListOffset = 0, name: QueryText = None,
                          name_case_sensitive: ExactName = None,
                          archived: bool | None = None) -> svc.WorkspacesResponse:
    return await svc.list_workspaces(runtime_of(request), name=name, exact_name=name_case_sensitive,
                                     archived=archived, offset=offset, limit=limit)


ROUTES = [list_workspaces]
