"""Config templates (Determined's ``/api/v1/templates``): named partial experiment configs.

An experiment names one with ``template`` and the master merges it under the experiment's config
before validation (``config/merge.py``; ``config_for_experiment`` here). Names are unique and
bounded; a template's config is plain JSON under the same byte and depth caps as an experiment
config, checked off the event loop. Anyone signed in may read templates; creating one needs the
CREATE action, changing or deleting one its owner or an admin (``authz.require_owner``). Answers
carry the config with its secrets redacted, and a masked value sent back keeps the stored secret.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
import msgspec
from sqlalchemy import delete, false, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Template, User
from controlplane.master.errors import BadRequest, Conflict, NotFound
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.redaction import redact_config, restore_masked
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.fields import Id, plain_json
from controlplane.master.services.models import WORKSPACE_ID
from controlplane.master.services.paging import Pagination
from controlplane.master.settings import MasterSettings

MAX_PAGE = 1000
# No control characters and no '/': a name is also a path segment.
NAME_PATTERN = r"^[^\x00-\x1f\x7f/]+$"
TemplateName = Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=NAME_PATTERN)]


class TemplateBody(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Template``; ``name``, when given, must be the path's."""

    config: dict[str, Any] | None = None
    name: TemplateName | None = None
    workspace_id: Id | None = None


class TemplateRequest(TemplateBody, kw_only=True):
    """The template itself (as Determined's client sends it), or wrapped as ``{"template": {...}}``."""

    template: TemplateBody | None = None

    def body(self) -> TemplateBody:
        return self.template if self.template is not None else self


class V1Template(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Template`` plus its owner."""

    name: str
    config: dict[str, Any]
    workspace_id: int
    user_id: int
    username: str


class TemplateResponse(msgspec.Struct, rename="camel", kw_only=True):
    template: V1Template


class TemplatesResponse(msgspec.Struct, rename="camel", kw_only=True):
    templates: list[V1Template]
    pagination: Pagination


def v1_template(tpl: Template, username: str) -> V1Template:
    return V1Template(name=tpl.name, config=redact_config(tpl.config), workspace_id=tpl.workspace_id,
                      user_id=tpl.owner_id, username=username)


# ---- input checks ---------------------------------------------------------------------------
def check_name(name: str, body_name: str | None = None) -> str:
    if name != name.strip():
        raise BadRequest(f"template_name: must not start or end with whitespace, got {name!r}")
    if body_name not in (None, "", name):
        raise BadRequest(f"name: {body_name!r} is not the template named in the path ({name!r})")
    return name


def _check_workspace(workspace_id: int | None) -> None:
    if workspace_id not in (None, 0, WORKSPACE_ID):
        raise NotFound(f"workspaceId: workspace {workspace_id} not found (this master has one: id {WORKSPACE_ID})")


async def checked_config(rt: MasterRuntime, config: dict[str, Any] | None) -> dict[str, Any]:
    """The config if it is plain JSON under the experiment config caps (checked in a worker thread)."""
    if config is None:
        raise BadRequest("config: required (the template's settings, a mapping)")
    checked = await anyio.to_thread.run_sync(plain_json, config, "config", rt.settings.config_limits())
    _check_preemption_timeout(rt.settings, checked)
    return checked


def _check_preemption_timeout(settings: MasterSettings, config: dict[str, Any]) -> None:
    """As an experiment's (``experiments.check_preemption_timeout``): at most the pool the template
    names, else at most the longest any pool allows (its experiment's own pool is checked at create)."""
    resources = config.get("resources")
    named = resources.get("resource_pool") if isinstance(resources, dict) else None
    pools = [named] if isinstance(named, str) and named in settings.pool_names() else settings.pool_names()
    if (problem := settings.preemption_timeout_problem(config.get("preemption_timeout"), pools)) is not None:
        raise BadRequest(f"config.preemption_timeout: {problem}")


# ---- lookups --------------------------------------------------------------------------------
async def _find(session: AsyncSession, name: str, *, lock: bool = False) -> Template | None:
    q = select(Template).where(Template.name == name)
    return await session.scalar(q.with_for_update() if lock else q)


async def _found(session: AsyncSession, name: str, *, lock: bool = False) -> Template:
    tpl = await _find(session, name, lock=lock)
    if tpl is None:
        raise NotFound(f"template {name!r} not found")
    return tpl


async def _username(session: AsyncSession, user_id: int) -> str:
    return await session.scalar(select(User.username).where(User.id == user_id)) or ""


def _require_owner(principal: Principal, tpl: Template) -> None:
    require_owner(principal, Action.EDIT, tpl.owner_id, f"template {tpl.name!r}")


# ---- reads ----------------------------------------------------------------------------------
async def list_templates(rt: MasterRuntime, *, offset: int, limit: int, name: str | None, descending: bool,
                         workspace_ids: list[int]) -> TemplatesResponse:
    """A page by name; ``name`` matches part of it (any case); a negative offset counts from the end."""
    limit = MAX_PAGE if limit <= 0 else min(limit, MAX_PAGE)
    q = select(Template, User.username).join(User, User.id == Template.owner_id)
    if name:
        q = q.where(func.lower(Template.name).contains(name.lower(), autoescape=True))
    if workspace_ids and WORKSPACE_ID not in workspace_ids:
        q = q.where(false())
    async with rt.sessions() as session:
        total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
        start = max(total + offset, 0) if offset < 0 else offset
        order = Template.name.desc() if descending else Template.name.asc()
        rows = (await session.execute(q.order_by(order).offset(start).limit(limit))).all()
    return TemplatesResponse(templates=[v1_template(t, u) for t, u in rows],
                             pagination=Pagination(offset=start, limit=limit, start_index=start,
                                                   end_index=start + len(rows), total=total))


async def get_template(rt: MasterRuntime, name: str) -> V1Template:
    async with rt.sessions() as session:
        tpl = await _found(session, name)
        return v1_template(tpl, await _username(session, tpl.owner_id))


async def config_for_experiment(rt: MasterRuntime, name: str) -> dict[str, Any]:
    """The stored config (secrets included) of the template an experiment names: a 400 naming it if unknown."""
    async with rt.sessions() as session:
        tpl = await _find(session, name)
    if tpl is None:
        raise BadRequest(f"template: no template named {name!r} (see det template list)")
    return tpl.config


# ---- changes --------------------------------------------------------------------------------
async def create_template(rt: MasterRuntime, user: AuthedUser, name: str, data: TemplateBody) -> V1Template:
    check_name(name, data.name)
    _check_workspace(data.workspace_id)
    config = await checked_config(rt, data.config)
    now = utcnow()
    try:
        async with rt.sessions.begin() as session:
            if await _find(session, name) is not None:
                raise Conflict(f"name: a template named {name!r} already exists")
            tpl = Template(name=name, config=config, workspace_id=WORKSPACE_ID, owner_id=user.id,
                           created_at=now, updated_at=now)
            session.add(tpl)
            await session.flush()
    except IntegrityError:  # a concurrent create of the same name won
        raise Conflict(f"name: a template named {name!r} already exists") from None
    return v1_template(tpl, user.username)


async def set_config(rt: MasterRuntime, principal: Principal, name: str, config: dict[str, Any] | None) -> V1Template:
    """A new config for an existing template (its owner or an admin)."""
    check_name(name)
    async with rt.sessions() as session:  # who may, before the config is read: a stranger learns nothing more
        _require_owner(principal, await _found(session, name))
    config = await checked_config(rt, config)
    async with rt.sessions.begin() as session:
        tpl = await _found(session, name, lock=True)
        _require_owner(principal, tpl)  # it may have been deleted and created again meanwhile
        tpl.config = restore_masked(config, tpl.config)
        tpl.updated_at = utcnow()
        return v1_template(tpl, await _username(session, tpl.owner_id))


async def put_template(rt: MasterRuntime, user: AuthedUser, name: str, data: TemplateBody) -> V1Template:
    """Create the template, or set the config of the existing one (its owner or an admin)."""
    check_name(name, data.name)
    _check_workspace(data.workspace_id)
    for _ in range(2):  # a concurrent create between our look and our insert: look again
        async with rt.sessions() as session:
            exists = await _find(session, name) is not None
        if exists:
            return await set_config(rt, user, name, data.config)
        try:
            return await create_template(rt, user, name, data)
        except Conflict:
            continue
    raise Conflict(f"name: template {name!r} is being created and deleted concurrently; try again")


async def delete_template(rt: MasterRuntime, principal: Principal, name: str) -> None:
    async with rt.sessions.begin() as session:
        tpl = await _found(session, name, lock=True)
        _require_owner(principal, tpl)
        await session.execute(delete(Template).where(Template.id == tpl.id))
