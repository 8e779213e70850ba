"""The one workspace: Determined's default ``Uncategorized`` (id 1), which holds all work here.

Determined's client lists workspaces to name the workspace of templates and models
(``det template list``); this master has no others, so the listing answers that one.
"""

from __future__ import annotations

import msgspec
from sqlalchemy import func, select

from controlplane.master.db.models import Experiment
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.models import WORKSPACE_ID, WORKSPACE_NAME
from controlplane.master.services.paging import Pagination


class V1Workspace(msgspec.Struct, rename="camel", kw_only=True):
    """The fields Determined's ``v1Workspace.from_json`` requires."""

    id: int
    name: str
    archived: bool
    error_message: str
    immutable: bool
    num_experiments: int
    num_projects: int
    pinned: bool
    state: str
    user_id: int
    username: str


class WorkspacesResponse(msgspec.Struct, rename="camel", kw_only=True):
    workspaces: list[V1Workspace]
    pagination: Pagination


async def list_workspaces(rt: MasterRuntime, *, name: str | None, exact_name: str | None,
                          archived: bool | None, offset: int, limit: int) -> WorkspacesResponse:
    """The default workspace if it matches every filter given (``name``: part of it, any case)."""
    matches = ((not name or name.lower() in WORKSPACE_NAME.lower())
               and exact_name in (None, "", WORKSPACE_NAME) and archived in (None, False))
    found = []
    if matches and offset == 0:
        async with rt.sessions() as session:
            count = await session.scalar(select(func.count()).select_from(Experiment)) or 0
        found = [V1Workspace(id=WORKSPACE_ID, name=WORKSPACE_NAME, archived=False, error_message="", immutable=True,
                             num_experiments=count, num_projects=1, pinned=False,
                             state="WORKSPACE_STATE_UNSPECIFIED", user_id=1, username="admin")]
    total = 1 if matches else 0
    return WorkspacesResponse(workspaces=found, pagination=Pagination(
        offset=offset, limit=limit, start_index=offset, end_index=offset + len(found), total=total))
