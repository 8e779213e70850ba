"""Workspaces and projects: Determined's ``/api/v1/workspaces`` and ``/api/v1/projects`` paths.

Reading is for everyone signed in; creating for those who may create work; renaming and deleting
for the owner or an admin (``services/workspaces.py`` holds the rules).
"""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post
from litestar.params import Parameter, QueryParameter

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import MAX_ID, ListLimit, ListOffset, OrderBy, QueryText, SortBy
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.typed_body import TypedBody
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import workspaces as svc

ExactName = Annotated[str | None, QueryParameter(name="nameCaseSensitive", max_length=255, pattern=r"^[^\x00]*$")]
WorkspaceId = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the workspace's id")]
AnyWorkspaceId = Annotated[int, Parameter(ge=0, le=MAX_ID, description="the workspace's id; 0: every workspace")]
ProjectId = Annotated[int, Parameter(ge=1, le=MAX_ID, description="the project's id")]
Users = Annotated[list[str] | None, Parameter(max_items=100, description="owners' usernames")]
UserIds = Annotated[list[int] | None, QueryParameter(name="userIds", max_items=100, description="owners' ids")]


def usernames_of(values: list[str] | None) -> list[str]:
    """``users`` checked as usernames: a NUL byte, which PostgreSQL refuses in text, is a 400 here."""
    for value in values or []:
        if "\x00" in value or len(value) > 255:
            raise BadRequest(f"users: {value[:40]!r} is not a username (at most 255 characters, no NUL)")
    return values or []


def user_ids_of(values: list[int] | None) -> list[int]:
    """``userIds`` checked as ids (a value past 32 bits would overflow the database's column)."""
    for value in values or []:
        if not 0 <= value <= MAX_ID:
            raise BadRequest(f"userIds: {value} is not a user id (0..{MAX_ID})")
    return values or []


@get("/api/v1/workspaces", operation_id="GetWorkspaces", opt=opt(Action.VIEW), tags=["workspaces"])
async def list_workspaces(request: AnyRequest, limit: ListLimit = 0, offset: ListOffset = 0, name: QueryText = None,
                          name_case_sensitive: ExactName = None, archived: bool | None = None,
                          pinned: bool | None = None, users: Users = None, user_ids: UserIds = None,
                          sort_by: SortBy = None, order_by: OrderBy = None) -> svc.WorkspacesResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        return await svc.list_workspaces(session, name=name, exact_name=name_case_sensitive, archived=archived,
                                         pinned=pinned, users=usernames_of(users), user_ids=user_ids_of(user_ids),
                                         sort_by=sort_by, order_by=order_by, offset=offset, limit=limit)


@get("/api/v1/workspaces/{workspace_id:int}", operation_id="GetWorkspace", opt=opt(Action.VIEW),
     tags=["workspaces"])
async def get_workspace(request: AnyRequest, workspace_id: WorkspaceId) -> svc.WorkspaceResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        ws = await svc.get_workspace(session, workspace_id)
        return svc.WorkspaceResponse(workspace=(await svc.workspace_views(session, [ws]))[0])


@post("/api/v1/workspaces", operation_id="PostWorkspace", opt=opt(Action.CREATE), tags=["workspaces"],
      status_code=200, dto=TypedBody[svc.PostWorkspaceRequest], return_dto=None)
async def create_workspace(request: AnyRequest, data: svc.PostWorkspaceRequest) -> svc.PostWorkspaceResponse:
    async with runtime_of(request).sessions.begin() as session:
        ws = await svc.create_workspace(session, user_of(request), data)
        return svc.PostWorkspaceResponse(workspace=(await svc.workspace_views(session, [ws]))[0])


@patch("/api/v1/workspaces/{workspace_id:int}", operation_id="PatchWorkspace", opt=opt(Action.EDIT),
       tags=["workspaces"], dto=TypedBody[svc.PatchWorkspace], return_dto=None)
async def patch_workspace(request: AnyRequest, workspace_id: WorkspaceId,
                          data: svc.PatchWorkspace) -> svc.WorkspaceResponse:
    async with runtime_of(request).sessions.begin() as session:
        ws = await svc.patch_workspace(session, principal_of(request), workspace_id, data)
        return svc.WorkspaceResponse(workspace=(await svc.workspace_views(session, [ws]))[0])


@delete("/api/v1/workspaces/{workspace_id:int}", operation_id="DeleteWorkspace", opt=opt(Action.EDIT),
        tags=["workspaces"], status_code=200)
async def delete_workspace(request: AnyRequest, workspace_id: WorkspaceId) -> svc.DeleteResponse:
    """Only an empty workspace (no experiments in its projects) is deleted, with its projects."""
    async with runtime_of(request).sessions.begin() as session:
        await svc.delete_workspace(session, principal_of(request), workspace_id)
    return svc.DeleteResponse()


@get("/api/v1/workspaces/{workspace_id:int}/projects", operation_id="GetWorkspaceProjects", opt=opt(Action.VIEW),
     tags=["projects"])
async def list_projects(request: AnyRequest, workspace_id: AnyWorkspaceId, limit: ListLimit = 0,
                        offset: ListOffset = 0, name: QueryText = None, archived: bool | None = None,
                        users: Users = None, user_ids: UserIds = None, sort_by: SortBy = None,
                        order_by: OrderBy = None) -> svc.ProjectsResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        return await svc.list_projects(session, workspace_id, name=name, archived=archived, users=usernames_of(users),
                                       user_ids=user_ids_of(user_ids), sort_by=sort_by, order_by=order_by,
                                       offset=offset, limit=limit)


@post("/api/v1/workspaces/{workspace_id:int}/projects", operation_id="PostProject", opt=opt(Action.CREATE),
      tags=["projects"], status_code=200, dto=TypedBody[svc.PostProjectRequest], return_dto=None)
async def create_project(request: AnyRequest, workspace_id: WorkspaceId,
                         data: svc.PostProjectRequest) -> svc.ProjectResponse:
    async with runtime_of(request).sessions.begin() as session:
        project = await svc.create_project(session, user_of(request), workspace_id, data)
        return svc.ProjectResponse(project=(await svc.project_views(session, [project]))[0])


@get("/api/v1/projects/{project_id:int}", operation_id="GetProject", opt=opt(Action.VIEW), tags=["projects"])
async def get_project(request: AnyRequest, project_id: ProjectId) -> svc.ProjectResponse:
    user_of(request)
    async with runtime_of(request).sessions() as session:
        project = await svc.get_project(session, project_id)
        return svc.ProjectResponse(project=(await svc.project_views(session, [project]))[0])


@patch("/api/v1/projects/{project_id:int}", operation_id="PatchProject", opt=opt(Action.EDIT), tags=["projects"],
       dto=TypedBody[svc.PatchProject], return_dto=None)
async def patch_project(request: AnyRequest, project_id: ProjectId, data: svc.PatchProject) -> svc.ProjectResponse:
    async with runtime_of(request).sessions.begin() as session:
        project = await svc.patch_project(session, principal_of(request), project_id, data)
        return svc.ProjectResponse(project=(await svc.project_views(session, [project]))[0])


@delete("/api/v1/projects/{project_id:int}", operation_id="DeleteProject", opt=opt(Action.EDIT), tags=["projects"],
        status_code=200)
async def delete_project(request: AnyRequest, project_id: ProjectId) -> svc.DeleteResponse:
    """Only a project without experiments is deleted."""
    async with runtime_of(request).sessions.begin() as session:
        await svc.delete_project(session, principal_of(request), project_id)
    return svc.DeleteResponse()


@post("/api/v1/workspaces/{workspace_id:int}/archive", operation_id="ArchiveWorkspace", opt=opt(Action.EDIT),
      tags=["workspaces"], status_code=200)
async def archive_workspace(request: AnyRequest, workspace_id: WorkspaceId) -> EmptyResponse:
    async with runtime_of(request).sessions.begin() as session:
        await svc.set_workspace_archived(session, principal_of(request), workspace_id, True)
    return EmptyResponse()


@post("/api/v1/workspaces/{workspace_id:int}/unarchive", operation_id="UnarchiveWorkspace", opt=opt(Action.EDIT),
      tags=["workspaces"], status_code=200)
async def unarchive_workspace(request: AnyRequest, workspace_id: WorkspaceId) -> EmptyResponse:
    async with runtime_of(request).sessions.begin() as session:
        await svc.set_workspace_archived(session, principal_of(request), workspace_id, False)
    return EmptyResponse()


@post("/api/v1/projects/{project_id:int}/archive", operation_id="ArchiveProject", opt=opt(Action.EDIT),
      tags=["projects"], status_code=200)
async def archive_project(request: AnyRequest, project_id: ProjectId) -> EmptyResponse:
    async with runtime_of(request).sessions.begin() as session:
        await svc.set_project_archived(session, principal_of(request), project_id, True)
    return EmptyResponse()


@post("/api/v1/projects/{project_id:int}/unarchive", operation_id="UnarchiveProject", opt=opt(Action.EDIT),
      tags=["projects"], status_code=200)
async def unarchive_project(request: AnyRequest, project_id: ProjectId) -> EmptyResponse:
    async with runtime_of(request).sessions.begin() as session:
        await svc.set_project_archived(session, principal_of(request), project_id, False)
    return EmptyResponse()


ROUTES = [list_workspaces, get_workspace, create_workspace, patch_workspace, delete_workspace, list_projects,
          create_project, get_project, patch_project, delete_project, archive_workspace, unarchive_workspace,
          archive_project, unarchive_project]
