"""Workspaces and projects over Determined's ``/api/v1/workspaces`` and ``/api/v1/projects`` shapes.

Determined's defaults exist from the first start: workspace ``Uncategorized`` (id 1) holding
project ``Uncategorized`` (id 1), both immutable; every experiment belongs to one project (the
default unless its config names ``workspace:`` and ``project:`` or the request a ``projectId``).
Anyone who may create work may create a workspace or a project; renaming or deleting one needs
its owner or an admin (``authz.require_owner``), and a workspace or project that still holds
experiments is not deleted. Workspace names are unique whatever their case (Determined's rule),
project names within their workspace, project keys across the cluster.
"""

from __future__ import annotations

import secrets
import string
from datetime import datetime
from typing import Annotated, Any

import msgspec
from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso, utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Experiment, Project, User, Workspace
from controlplane.master.errors import BadRequest, Conflict, NotFound
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.services.paging import Pagination

DEFAULT_ID = 1
DEFAULT_NAME = "Uncategorized"
MAX_PAGE = 1000
ACTIVE = "ACTIVE"  # controlplane.state.experiment: what numActiveExperiments counts

# No control character (NUL, which PostgreSQL text cannot hold, included) and not blank.
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=80, pattern=NAME_PATTERN)]
Description = Annotated[str, msgspec.Meta(max_length=4096, pattern=r"^[^\x00]*$")]
Key = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9]{1,5}$")]
Id = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


# ---- wire shapes -----------------------------------------------------------------------------
class V1Workspace(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Workspace`` (every field its ``from_json`` requires)."""

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


class V1Project(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Project``."""

    id: int
    name: str
    key: str
    description: str
    workspace_id: int
    workspace_name: str
    archived: bool
    immutable: bool
    error_message: str
    notes: list[dict[str, str]]
    num_active_experiments: int
    num_experiments: int
    num_runs: int
    state: str
    user_id: int
    username: str
    last_experiment_started_at: str | None = None


class WorkspacesResponse(msgspec.Struct, rename="camel", kw_only=True):
    workspaces: list[V1Workspace]
    pagination: Pagination


class WorkspaceResponse(msgspec.Struct, rename="camel", kw_only=True):
    workspace: V1Workspace


class PostWorkspaceResponse(msgspec.Struct, rename="camel", kw_only=True):
    workspace: V1Workspace
    namespace_bindings: dict[str, Any] = msgspec.field(default_factory=dict)  # the CLI iterates it


class ProjectsResponse(msgspec.Struct, rename="camel", kw_only=True):
    projects: list[V1Project]
    pagination: Pagination


class ProjectResponse(msgspec.Struct, rename="camel", kw_only=True):
    project: V1Project


class DeleteResponse(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1DeleteWorkspaceResponse``/``v1DeleteProjectResponse``: done at once here."""

    completed: bool = True


class PostWorkspaceRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PostWorkspaceRequest``; the Kubernetes, agent-user and storage settings are
    not kept by this master, so a value for them is refused rather than silently dropped."""

    name: Name
    agent_user_group: dict[str, Any] | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    default_compute_pool: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    default_aux_pool: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    cluster_namespace_meta: dict[str, Any] | None = None
    cluster_quota_pairs: dict[str, Any] | None = None


class PatchWorkspace(msgspec.Struct, rename="camel", kw_only=True):
    name: Name | None = None
    agent_user_group: dict[str, Any] | None = None
    checkpoint_storage_config: dict[str, Any] | None = None
    default_compute_pool: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    default_aux_pool: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    cluster_namespace_meta: dict[str, Any] | None = None
    cluster_quota_pairs: dict[str, Any] | None = None


class PostProjectRequest(msgspec.Struct, rename="camel", kw_only=True):
    name: Name
    workspace_id: Id | None = None  # also in the path, which wins; a different one is refused
    description: Description | None = None
    key: Key | None = None


class PatchProject(msgspec.Struct, rename="camel", kw_only=True):
    name: Name | None = None
    description: Description | None = None
    key: Key | None = None


UNSUPPORTED = ("agent_user_group", "checkpoint_storage_config", "default_compute_pool", "default_aux_pool",
               "cluster_namespace_meta", "cluster_quota_pairs")


def _refuse_unsupported(data: PostWorkspaceRequest | PatchWorkspace) -> None:
    for attr in UNSUPPORTED:
        if getattr(data, attr) not in (None, "", {}):
            camel = "".join(w.capitalize() if i else w for i, w in enumerate(attr.split("_")))
            raise BadRequest(f"{camel}: not supported by this master (workspaces here hold projects only)")


# ---- views -----------------------------------------------------------------------------------
async def _usernames(session: AsyncSession, ids: set[int | None]) -> dict[int, str]:
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    return dict((await session.execute(select(User.id, User.username).where(User.id.in_(wanted)))).all())


async def workspace_views(session: AsyncSession, rows: list[Workspace]) -> list[V1Workspace]:
    """One query per count for the whole page, never per row."""
    ids = [w.id for w in rows]
    if not ids:
        return []
    projects = dict((await session.execute(select(Project.workspace_id, func.count()).where(
        Project.workspace_id.in_(ids)).group_by(Project.workspace_id))).all())
    experiments = dict((await session.execute(
        select(Project.workspace_id, func.count(Experiment.id)).join(Experiment, Experiment.project_id == Project.id)
        .where(Project.workspace_id.in_(ids)).group_by(Project.workspace_id))).all())
    names = await _usernames(session, {w.owner_id for w in rows})
    return [V1Workspace(id=w.id, name=w.name, archived=w.archived, error_message="", immutable=w.immutable,
                        num_experiments=experiments.get(w.id, 0), num_projects=projects.get(w.id, 0), pinned=False,
                        state="WORKSPACE_STATE_UNSPECIFIED", user_id=w.owner_id or 0,
                        username=names.get(w.owner_id or 0, ""))
            for w in rows]


async def project_views(session: AsyncSession, rows: list[Project]) -> list[V1Project]:
    ids = [p.id for p in rows]
    if not ids:
        return []
    counts = {pid: (n, active, last) for pid, n, active, last in (await session.execute(
        select(Experiment.project_id, func.count(), func.count().filter(Experiment.state == ACTIVE),
               func.max(Experiment.start_time))
        .where(Experiment.project_id.in_(ids)).group_by(Experiment.project_id))).all()}
    spaces = dict((await session.execute(select(Workspace.id, Workspace.name).where(
        Workspace.id.in_({p.workspace_id for p in rows})))).all())
    archived = set((await session.scalars(select(Workspace.id).where(
        Workspace.id.in_({p.workspace_id for p in rows}), Workspace.archived.is_(True)))).all())
    names = await _usernames(session, {p.owner_id for p in rows})
    out = []
    for p in rows:
        n, active, last = counts.get(p.id, (0, 0, None))
        out.append(V1Project(
            id=p.id, name=p.name, key=p.key, description=p.description or "", workspace_id=p.workspace_id,
            workspace_name=spaces.get(p.workspace_id, ""), archived=p.archived or p.workspace_id in archived,
            immutable=p.immutable, error_message="", notes=[], num_active_experiments=active, num_experiments=n,
            num_runs=0, state="WORKSPACE_STATE_UNSPECIFIED", user_id=p.owner_id or 0,
            username=names.get(p.owner_id or 0, ""), last_experiment_started_at=_iso(last)))
    return out


def _iso(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


def _page(offset: int, limit: int) -> tuple[int, int]:
    return offset, MAX_PAGE if limit <= 0 else min(limit, MAX_PAGE)


def _ordered(q: Select[Any], column: Any, id_column: Any, sort_by: str | None, order_by: str | None) -> Select[Any]:
    desc = order_by == "ORDER_BY_DESC"
    cols = [column, id_column] if sort_by == "SORT_BY_NAME" else [id_column]
    return q.order_by(*(c.desc() if desc else c.asc() for c in cols))


async def _listed(session: AsyncSession, q: Select[Any], column: Any, id_column: Any, sort_by: str | None,
                  order_by: str | None, offset: int, limit: int) -> tuple[list[Any], Pagination]:
    """One page of ``q`` in the order asked for, and Determined's pagination of it."""
    offset, size = _page(offset, limit)
    total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = list((await session.scalars(_ordered(q, column, id_column, sort_by, order_by)
                                       .offset(offset).limit(size))).all())
    return rows, Pagination(offset=offset, limit=limit, start_index=offset, end_index=offset + len(rows),
                            total=total)


def _users_filter(q: Select[Any], owner_column: Any, users: list[str], user_ids: list[int]) -> Select[Any]:
    if users:
        q = q.where(owner_column.in_(select(User.id).where(User.username.in_(users))))
    if user_ids:
        q = q.where(owner_column.in_(user_ids))
    return q


# ---- workspaces ------------------------------------------------------------------------------
async def list_workspaces(session: AsyncSession, *, name: str | None, exact_name: str | None,
                          archived: bool | None, pinned: bool | None, users: list[str], user_ids: list[int],
                          sort_by: str | None, order_by: str | None, offset: int, limit: int) -> WorkspacesResponse:
    """``name``: the whole name in any case (Determined's ILIKE); ``nameCaseSensitive``: exactly."""
    if sort_by not in (None, "", "SORT_BY_UNSPECIFIED", "SORT_BY_ID", "SORT_BY_NAME"):
        raise BadRequest(f"sortBy: must be SORT_BY_ID or SORT_BY_NAME, got {sort_by}")
    q = select(Workspace)
    if name:
        q = q.where(Workspace.name_key == name.lower())
    if exact_name:
        q = q.where(Workspace.name == exact_name)
    if archived is not None:
        q = q.where(Workspace.archived.is_(archived))
    if pinned:  # nothing is pinned here
        q = q.where(Workspace.id.is_(None))
    q = _users_filter(q, Workspace.owner_id, users, user_ids)
    rows, page = await _listed(session, q, Workspace.name, Workspace.id, sort_by, order_by, offset, limit)
    return WorkspacesResponse(workspaces=await workspace_views(session, rows), pagination=page)


async def get_workspace(session: AsyncSession, workspace_id: int) -> Workspace:
    ws = await session.get(Workspace, workspace_id)
    if ws is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return ws


async def _check_workspace_name(session: AsyncSession, name: str, other_than: int | None = None) -> None:
    q = select(Workspace.id).where(Workspace.name_key == name.lower())
    if other_than is not None:
        q = q.where(Workspace.id != other_than)
    if await session.scalar(q) is not None:
        raise Conflict(f"name: a workspace named {name!r} exists already (names are unique regardless of case)")


async def create_workspace(session: AsyncSession, user: AuthedUser, data: PostWorkspaceRequest) -> Workspace:
    _refuse_unsupported(data)
    await _check_workspace_name(session, data.name)
    ws = Workspace(name=data.name, name_key=data.name.lower(), owner_id=user.id, archived=False, immutable=False,
                   created_at=utcnow())
    session.add(ws)
    await session.flush()
    return ws


def _mutable(immutable: bool, what: str) -> None:
    if immutable:
        raise Conflict(f"{what} is Determined's default and cannot be changed or deleted")


async def patch_workspace(session: AsyncSession, principal: Principal, workspace_id: int,
                          data: PatchWorkspace) -> Workspace:
    ws = await get_workspace(session, workspace_id)
    require_owner(principal, Action.EDIT, ws.owner_id or 0, f"workspace {ws.name!r}")
    _refuse_unsupported(data)
    if data.name is not None and data.name != ws.name:
        _mutable(ws.immutable, f"workspace {ws.name!r}")
        await _check_workspace_name(session, data.name, other_than=ws.id)
        ws.name, ws.name_key = data.name, data.name.lower()
    await session.flush()
    return ws


async def set_workspace_archived(session: AsyncSession, principal: Principal, workspace_id: int,
                                 archived: bool) -> None:
    """``det workspace archive|unarchive``: its owner or an admin; Determined's default workspace stays."""
    ws = await get_workspace(session, workspace_id)
    require_owner(principal, Action.EDIT, ws.owner_id or 0, f"workspace {ws.name!r}")
    _mutable(ws.immutable, f"workspace {ws.name!r}")
    ws.archived = archived
    await session.flush()


async def set_project_archived(session: AsyncSession, principal: Principal, project_id: int, archived: bool) -> None:
    """``det project archive|unarchive``: its owner or an admin; Determined's default project stays."""
    project = await get_project(session, project_id)
    require_owner(principal, Action.EDIT, project.owner_id or 0, f"project {project.name!r}")
    _mutable(project.immutable, f"project {project.name!r}")
    project.archived = archived
    await session.flush()


async def _experiments_in(session: AsyncSession, project_ids: Select[Any] | list[int]) -> int:
    return await session.scalar(select(func.count()).select_from(Experiment).where(
        Experiment.project_id.in_(project_ids))) or 0


async def delete_workspace(session: AsyncSession, principal: Principal, workspace_id: int) -> None:
    ws = await get_workspace(session, workspace_id)
    require_owner(principal, Action.EDIT, ws.owner_id or 0, f"workspace {ws.name!r}")
    _mutable(ws.immutable, f"workspace {ws.name!r}")
    held = await _experiments_in(session, select(Project.id).where(Project.workspace_id == ws.id))
    if held:
        raise Conflict(f"workspace {ws.name!r} holds {held} experiment(s); delete or move them first")
    for project in (await session.scalars(select(Project).where(Project.workspace_id == ws.id))).all():
        await session.delete(project)
    await session.flush()
    await session.delete(ws)
    await session.flush()


# ---- projects --------------------------------------------------------------------------------
async def list_projects(session: AsyncSession, workspace_id: int, *, name: str | None, archived: bool | None,
                        users: list[str], user_ids: list[int], sort_by: str | None, order_by: str | None,
                        offset: int, limit: int) -> ProjectsResponse:
    """A workspace's projects (``workspace_id`` 0: every workspace's, as in Determined)."""
    if sort_by not in (None, "", "SORT_BY_UNSPECIFIED", "SORT_BY_ID", "SORT_BY_NAME", "SORT_BY_CREATION_TIME"):
        raise BadRequest(f"sortBy: must be SORT_BY_ID, SORT_BY_NAME or SORT_BY_CREATION_TIME, got {sort_by}")
    if workspace_id:
        await get_workspace(session, workspace_id)
    q = select(Project)
    if workspace_id:
        q = q.where(Project.workspace_id == workspace_id)
    if name:
        q = q.where(func.lower(Project.name) == name.lower())
    if archived is not None:
        q = q.where(Project.archived.is_(archived))
    q = _users_filter(q, Project.owner_id, users, user_ids)
    rows, page = await _listed(session, q, Project.name, Project.id, sort_by, order_by, offset, limit)
    return ProjectsResponse(projects=await project_views(session, rows), pagination=page)


async def get_project(session: AsyncSession, project_id: int) -> Project:
    project = await session.get(Project, project_id)
    if project is None:
        raise NotFound(f"project {project_id} not found")
    return project


async def _free_key(session: AsyncSession, name: str) -> str:
    """Determined's generated key: up to 3 letters of the name, then random ones, 5 in all."""
    prefix = "".join(c for c in name.upper() if c in string.ascii_uppercase + string.digits)[:3]
    for _ in range(20):
        key = prefix + "".join(secrets.choice(string.ascii_uppercase) for _ in range(5 - len(prefix)))
        if await session.scalar(select(Project.id).where(Project.key == key)) is None:
            return key
    raise Conflict("key: could not find a free project key; give one with --key")


async def _check_project_name(session: AsyncSession, workspace_id: int, name: str,
                              other_than: int | None = None) -> None:
    q = select(Project.id).where(Project.workspace_id == workspace_id, Project.name == name)
    if other_than is not None:
        q = q.where(Project.id != other_than)
    if await session.scalar(q) is not None:
        raise Conflict(f"name: the workspace has a project named {name!r} already")


async def _check_key(session: AsyncSession, key: str, other_than: int | None = None) -> str:
    key = key.upper()
    q = select(Project.id).where(Project.key == key)
    if other_than is not None:
        q = q.where(Project.id != other_than)
    if await session.scalar(q) is not None:
        raise Conflict(f"key: project key {key!r} is in use")
    return key


async def create_project(session: AsyncSession, user: AuthedUser, workspace_id: int,
                         data: PostProjectRequest) -> Project:
    if data.workspace_id not in (None, 0, workspace_id):
        raise BadRequest(f"workspaceId: {data.workspace_id} differs from the path's workspace {workspace_id}")
    ws = await get_workspace(session, workspace_id)
    if ws.archived:
        raise Conflict(f"workspace {ws.name!r} is archived")
    await _check_project_name(session, ws.id, data.name)
    key = await _check_key(session, data.key) if data.key else await _free_key(session, data.name)
    project = Project(name=data.name, workspace_id=ws.id, description=data.description or "", key=key,
                      owner_id=user.id, archived=False, immutable=False, created_at=utcnow())
    session.add(project)
    await session.flush()
    return project


async def patch_project(session: AsyncSession, principal: Principal, project_id: int,
                        data: PatchProject) -> Project:
    project = await get_project(session, project_id)
    require_owner(principal, Action.EDIT, project.owner_id or 0, f"project {project.name!r}")
    changes = data.name not in (None, project.name) or data.key not in (None, project.key)
    if changes:
        _mutable(project.immutable, f"project {project.name!r}")
    if data.name is not None and data.name != project.name:
        await _check_project_name(session, project.workspace_id, data.name, other_than=project.id)
        project.name = data.name
    if data.key is not None and data.key.upper() != project.key:
        project.key = await _check_key(session, data.key, other_than=project.id)
    if data.description is not None:
        project.description = data.description
    await session.flush()
    return project


async def delete_project(session: AsyncSession, principal: Principal, project_id: int) -> None:
    project = await get_project(session, project_id)
    require_owner(principal, Action.EDIT, project.owner_id or 0, f"project {project.name!r}")
    _mutable(project.immutable, f"project {project.name!r}")
    held = await _experiments_in(session, [project.id])
    if held:
        raise Conflict(f"project {project.name!r} holds {held} experiment(s); delete or move them first")
    await session.delete(project)
    await session.flush()


# ---- experiments' project --------------------------------------------------------------------
async def project_for_experiment(session: AsyncSession, config: dict[str, Any], project_id: int | None) -> int:
    """Determined's rule: a ``projectId`` in the request wins; else the config's ``workspace`` and
    ``project`` (both or neither); else the default project. What does not exist is a 400 naming it."""
    if project_id and project_id > DEFAULT_ID:
        if await session.get(Project, project_id) is None:
            raise BadRequest(f"projectId: project {project_id} not found")
        return project_id
    workspace, project = config.get("workspace") or "", config.get("project") or ""
    if not isinstance(workspace, str) or not isinstance(project, str):
        raise BadRequest("workspace, project: must be names (strings)")
    if bool(workspace) != bool(project):
        raise BadRequest("workspace, project: name both or neither (only "
                         f"{'workspace' if workspace else 'project'} is set)")
    if not workspace:
        return DEFAULT_ID
    ws = await session.scalar(select(Workspace).where(Workspace.name == workspace))
    if ws is None:
        raise BadRequest(f"workspace: workspace {workspace!r} not found")
    found = await session.scalar(select(Project.id).where(Project.workspace_id == ws.id, Project.name == project))
    if found is None:
        raise BadRequest(f"project: project {project!r} not found in workspace {workspace!r}")
    return found


class ProjectNames(msgspec.Struct, frozen=True):
    project_id: int
    project_name: str
    project_owner_id: int
    workspace_id: int
    workspace_name: str


async def project_names(session: AsyncSession, project_ids: set[int]) -> dict[int, ProjectNames]:
    """What an experiment's answer shows of its project, for a page of experiments in one query."""
    if not project_ids:
        return {}
    rows = (await session.execute(
        select(Project.id, Project.name, Project.owner_id, Workspace.id, Workspace.name)
        .join(Workspace, Workspace.id == Project.workspace_id).where(Project.id.in_(project_ids)))).all()
    return {pid: ProjectNames(pid, pname, owner or 0, wid, wname) for pid, pname, owner, wid, wname in rows}


async def own_defaults(session: AsyncSession) -> None:
    """At start: the default workspace and project belong to ``admin`` (Determined's), once it exists."""
    admin = await session.scalar(select(User.id).where(User.username == "admin"))
    if admin is None:
        return
    for row in (await session.get(Workspace, DEFAULT_ID), await session.get(Project, DEFAULT_ID)):
        if row is not None and row.owner_id is None:
            row.owner_id = admin

