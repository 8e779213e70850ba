"""The model registry: checkpoints of any experiments grouped under a model name, as versions.

A model is named uniquely (a name of digits only is refused: the API looks a model up by name
or by numeric id in the same path segment). Its versions are numbered 1, 2, 3, ... in the order
they are registered; the number is taken under a lock on the model's row (``FOR UPDATE`` on
PostgreSQL, the write lock taken at ``BEGIN IMMEDIATE`` on SQLite), so concurrent registrations
never collide. Only a ``STATE_COMPLETED`` checkpoint can be registered, and a registered
checkpoint is never garbage-collected: see ``checkpoint_gc.collect.registered_checkpoint_uuids``.

Changing a model, registering, changing or deleting its versions needs the model's owner or an
admin (``authz.require_owner``). Request bodies are Determined's shapes, decoded at the edge.
The web UI's model pages read pages of models and versions here too (``model_rows``,
``version_rows``), one page of rows a query.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import (
    Checkpoint,
    Experiment,
    Metric,
    ModelVersion,
    RegisteredModel,
    Trial,
    User,
)
from controlplane.master.errors import BadRequest, Conflict, NotFound
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.runtime_core import RuntimeCore
from controlplane.master.services.fields import MAX_ID, CheckpointUuid, Id, Labels, Name, Text, plain_json
from controlplane.state import checkpoint as CK

WORKSPACE_ID = 1
WORKSPACE_NAME = "Uncategorized"
REGISTRABLE_STATE = CK.COMPLETED
MODEL_SORTS = {
    "SORT_BY_UNSPECIFIED": lambda v: v.model.id,
    "SORT_BY_NAME": lambda v: v.model.name,
    "SORT_BY_DESCRIPTION": lambda v: v.model.description or "",
    "SORT_BY_CREATION_TIME": lambda v: (v.model.created_at, v.model.id),
    "SORT_BY_LAST_UPDATED_TIME": lambda v: (v.model.updated_at, v.model.id),
    "SORT_BY_NUM_VERSIONS": lambda v: v.num_versions,
    "SORT_BY_WORKSPACE": lambda v: WORKSPACE_NAME,
}
VERSION_SORTS = {
    "SORT_BY_UNSPECIFIED": lambda v: v.version.version,
    "SORT_BY_VERSION": lambda v: v.version.version,
    "SORT_BY_CREATION_TIME": lambda v: (v.version.created_at, v.version.version),
}
ORDERS = {"ORDER_BY_UNSPECIFIED": False, "ORDER_BY_ASC": False, "ORDER_BY_DESC": True}


class PostModelRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PostModelRequest``."""

    name: str
    description: Text | None = None
    notes: Text | None = None
    metadata: dict[str, Any] | None = None
    labels: Labels | None = None
    workspace_name: Name | None = None
    workspace_id: Id | None = None


class PatchModel(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PatchModel``: fields present (and not null) are set."""

    name: str | None = None
    description: Text | None = None
    notes: Text | None = None
    metadata: dict[str, Any] | None = None
    labels: Labels | None = None
    workspace_name: Name | None = None
    workspace_id: Id | None = None


class PostModelVersionRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PostModelVersionRequest``."""

    checkpoint_uuid: CheckpointUuid
    model_name: Name | None = None
    name: Name | None = None
    comment: Text | None = None
    notes: Text | None = None
    metadata: dict[str, Any] | None = None
    labels: Labels | None = None


class PatchModelVersion(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1PatchModelVersion``; its checkpoint cannot change."""

    name: Name | None = None
    comment: Text | None = None
    notes: Text | None = None
    metadata: dict[str, Any] | None = None
    labels: Labels | None = None
    checkpoint: dict[str, Any] | None = None


@dataclass(frozen=True)
class ModelView:
    model: RegisteredModel
    username: str
    num_versions: int


@dataclass(frozen=True)
class VersionView:
    version: ModelVersion
    model: ModelView
    username: str
    checkpoint: Checkpoint
    experiment_config: dict[str, Any] | None  # of the experiment that wrote the checkpoint
    validation: dict[str, Any] | None  # that trial's validation metrics at the checkpoint's step
    hparams: dict[str, Any] | None = None  # that trial's hyperparameters


@dataclass(frozen=True)
class ModelFilter:
    """`GET /api/v1/models` query: every given filter must match."""

    name: str | None = None  # substring, case-insensitive
    description: str | None = None  # substring, case-insensitive
    model_id: int | None = None
    archived: bool | None = None
    labels: list[str] = dc_field(default_factory=list)  # the model carries all of them
    users: list[str] = dc_field(default_factory=list)
    user_ids: list[int] = dc_field(default_factory=list)
    workspace_names: list[str] = dc_field(default_factory=list)
    workspace_ids: list[int] = dc_field(default_factory=list)


@dataclass(frozen=True)
class ModelRow:
    """A model as the web UI's model list shows it."""

    name: str
    description: str
    labels: list[str]
    owner: str
    versions: int
    archived: bool
    updated: datetime


@dataclass(frozen=True)
class VersionRow:
    """A version as the web UI's model page shows it, with the checkpoint, trial and experiment behind it."""

    version: int
    name: str
    comment: str
    labels: list[str]
    owner: str
    created: datetime
    checkpoint_uuid: str
    checkpoint_state: str | None  # None: the checkpoint row is gone
    steps_completed: int | None
    trial_id: int | None
    experiment_id: int | None
    experiment_name: str | None


# ---- input checks ---------------------------------------------------------------------------
def _model_name(value: Any, name: str = "name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name}: required, a non-empty string")
    if value != value.strip():
        raise BadRequest(f"{name}: must not start or end with whitespace, got {value!r}")
    if len(value) > 255:
        raise BadRequest(f"{name}: at most 255 characters, got {len(value)}")
    if value.isdigit():
        raise BadRequest(f"{name}: must not be only digits (numbers address models by id), got {value!r}")
    if "/" in value or "\x00" in value:
        raise BadRequest(f"{name}: must not contain '/' or NUL, got {value!r}")
    return value


def _metadata(value: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    return None if value is None else plain_json(value, name)


def _labels(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(dict.fromkeys(value))


def _check_workspace(workspace_name: str | None, workspace_id: int | None) -> None:
    """There is one workspace, Determined's default; naming another one is an error."""
    if workspace_name not in (None, "", WORKSPACE_NAME):
        raise NotFound(f"workspaceName: workspace {workspace_name!r} not found (this master has one: "
                       f"{WORKSPACE_NAME!r})")
    if workspace_id not in (None, 0, WORKSPACE_ID):
        raise NotFound(f"workspaceId: workspace {workspace_id!r} not found (this master has one: id {WORKSPACE_ID})")


def _order(order_by: str | None) -> bool:
    key = order_by or "ORDER_BY_UNSPECIFIED"
    if key not in ORDERS:
        raise BadRequest(f"orderBy: must be one of {', '.join(ORDERS)}, got {order_by!r}")
    return ORDERS[key]


def _require_model_owner(principal: Principal, model: RegisteredModel) -> None:
    require_owner(principal, Action.EDIT, model.owner_id, f"model {model.name!r}")


# ---- lookups --------------------------------------------------------------------------------
async def _find_model(session: AsyncSession, ident: str, *, lock: bool = False) -> RegisteredModel:
    """By numeric id when ``ident`` is all digits, else by name (names are never all digits)."""
    if "\x00" in ident or (ident.isdigit() and (len(ident) > 10 or int(ident) > MAX_ID)):
        raise NotFound(f"model {ident!r} not found")
    q = select(RegisteredModel)
    q = q.where(RegisteredModel.id == int(ident)) if ident.isdigit() else q.where(RegisteredModel.name == ident)
    if lock:
        q = q.with_for_update()
    model = await session.scalar(q)
    if model is None:
        raise NotFound(f"model {ident!r} not found")
    return model


async def _usernames(session: AsyncSession, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    return dict((await session.execute(select(User.id, User.username).where(User.id.in_(ids)))).all())


async def _model_view(session: AsyncSession, model: RegisteredModel) -> ModelView:
    count = await session.scalar(select(func.count()).where(ModelVersion.model_id == model.id))
    names = await _usernames(session, {model.owner_id})
    return ModelView(model, names.get(model.owner_id, ""), int(count or 0))


async def _version_views(session: AsyncSession, mview: ModelView, versions: list[ModelVersion]) -> list[VersionView]:
    uuids = {v.checkpoint_uuid for v in versions}
    ckpts = {c.uuid: c for c in (await session.scalars(select(Checkpoint).where(Checkpoint.uuid.in_(uuids)))).all()} \
        if uuids else {}
    exp_ids = {c.experiment_id for c in ckpts.values() if c.experiment_id is not None}
    configs: dict[int | None, Any] = dict((await session.execute(select(Experiment.id, Experiment.config).where(
        Experiment.id.in_(exp_ids)))).all()) if exp_ids else {}
    names = await _usernames(session, {v.owner_id for v in versions})
    trial_ids = {c.trial_id for c in ckpts.values() if c.trial_id is not None}
    hparams: dict[int | None, Any] = dict((await session.execute(select(Trial.id, Trial.hparams).where(
        Trial.id.in_(trial_ids)))).all()) if trial_ids else {}
    out = []
    for v in versions:
        ckpt = ckpts[v.checkpoint_uuid]
        validation = None
        if ckpt.trial_id is not None:
            validation = await session.scalar(select(Metric.metrics).where(
                Metric.trial_id == ckpt.trial_id, Metric.group == "validation",
                Metric.steps_completed == ckpt.steps_completed).order_by(Metric.id.desc()).limit(1))
        out.append(VersionView(v, mview, names.get(v.owner_id, ""), ckpt, configs.get(ckpt.experiment_id),
                               validation, hparams.get(ckpt.trial_id)))
    return out


async def _find_version(session: AsyncSession, model: RegisteredModel, number: int) -> ModelVersion:
    version = await session.scalar(select(ModelVersion).where(
        ModelVersion.model_id == model.id, ModelVersion.version == number))
    if version is None:
        raise NotFound(f"model {model.name!r} has no version {number}")
    return version


# ---- models ---------------------------------------------------------------------------------
async def create_model(rt: RuntimeCore, user: AuthedUser, data: PostModelRequest) -> ModelView:
    name = _model_name(data.name)
    metadata = _metadata(data.metadata, "metadata") or {}
    _check_workspace(data.workspace_name, data.workspace_id)
    now = utcnow()
    try:
        async with rt.sessions.begin() as session:
            if await session.scalar(select(RegisteredModel.id).where(RegisteredModel.name == name)) is not None:
                raise Conflict(f"name: a model named {name!r} already exists")
            model = RegisteredModel(name=name, description=data.description or "", notes=data.notes or "",
                                    metadata_=metadata, labels=_labels(data.labels) or [], owner_id=user.id,
                                    archived=False, created_at=now, updated_at=now)
            session.add(model)
            await session.flush()
    except IntegrityError:  # a concurrent create of the same name won
        raise Conflict(f"name: a model named {name!r} already exists") from None
    return ModelView(model, user.username, 0)


async def get_model(rt: RuntimeCore, ident: str) -> ModelView:
    async with rt.sessions() as session:
        return await _model_view(session, await _find_model(session, ident))


LABELS_SCANNED = 10_000  # models read for ``GET /api/v1/model/labels``: a registry's models, bounded


async def model_labels(rt: RuntimeCore) -> list[str]:
    """Determined's ``GetModelLabels``: every label of the registry's models, most used first (ties
    by name); the newest ``LABELS_SCANNED`` models are read, so a huge registry stays one bounded query."""
    async with rt.sessions() as session:
        rows = (await session.scalars(select(RegisteredModel.labels).order_by(RegisteredModel.id.desc())
                                      .limit(LABELS_SCANNED))).all()
    counts: dict[str, int] = {}
    for labels in rows:
        for label in labels or []:
            if isinstance(label, str):
                counts[label] = counts.get(label, 0) + 1
    return sorted(counts, key=lambda label: (-counts[label], label))


async def list_models(rt: RuntimeCore, flt: ModelFilter, sort_by: str | None,
                      order_by: str | None) -> list[ModelView]:
    """Every model matching ``flt``, sorted (ties by id); the caller pages."""
    sort_key = MODEL_SORTS.get(sort_by or "SORT_BY_UNSPECIFIED")
    if sort_key is None:
        raise BadRequest(f"sortBy: must be one of {', '.join(MODEL_SORTS)}, got {sort_by!r}")
    descending = _order(order_by)
    if flt.workspace_names and WORKSPACE_NAME not in flt.workspace_names:
        return []
    if flt.workspace_ids and WORKSPACE_ID not in flt.workspace_ids:
        return []
    counts = (select(ModelVersion.model_id, func.count().label("n")).group_by(ModelVersion.model_id).subquery())
    q = (select(RegisteredModel, User.username, func.coalesce(counts.c.n, 0))
         .join(User, User.id == RegisteredModel.owner_id)
         .outerjoin(counts, counts.c.model_id == RegisteredModel.id))
    if flt.name:
        q = q.where(func.lower(RegisteredModel.name).contains(flt.name.lower(), autoescape=True))
    if flt.description:
        q = q.where(func.lower(RegisteredModel.description).contains(flt.description.lower(), autoescape=True))
    if flt.model_id is not None:
        q = q.where(RegisteredModel.id == flt.model_id)
    if flt.archived is not None:
        q = q.where(RegisteredModel.archived.is_(flt.archived))
    if flt.users:
        q = q.where(User.username.in_(flt.users))
    if flt.user_ids:
        q = q.where(RegisteredModel.owner_id.in_(flt.user_ids))
    async with rt.sessions() as session:
        rows = (await session.execute(q.order_by(RegisteredModel.id))).all()
    views = [ModelView(m, username, int(n)) for m, username, n in rows
             if all(label in (m.labels or []) for label in flt.labels)]
    views.sort(key=sort_key, reverse=descending)  # stable: equal keys stay in id order
    return views


async def patch_model(rt: RuntimeCore, principal: Principal, ident: str, data: PatchModel) -> ModelView:
    """Fields present (and not null) in the body are set; the others are left as they are."""
    new_name = _model_name(data.name) if data.name is not None else None
    metadata = _metadata(data.metadata, "metadata")
    _check_workspace(data.workspace_name, data.workspace_id)
    try:
        async with rt.sessions.begin() as session:
            model = await _find_model(session, ident, lock=True)
            _require_model_owner(principal, model)
            if new_name is not None and new_name != model.name:
                if await session.scalar(select(RegisteredModel.id).where(RegisteredModel.name == new_name)) is not None:
                    raise Conflict(f"name: a model named {new_name!r} already exists")
                model.name = new_name
            for attr, value in (("description", data.description), ("notes", data.notes), ("metadata_", metadata),
                                ("labels", _labels(data.labels))):
                if value is not None:
                    setattr(model, attr, value)
            model.updated_at = utcnow()
            await session.flush()
            return await _model_view(session, model)
    except IntegrityError:
        raise Conflict(f"name: a model named {new_name!r} already exists") from None


async def set_archived(rt: RuntimeCore, principal: Principal, ident: str, archived: bool) -> None:
    """ArchiveModel / UnarchiveModel (``Model.archive()`` of the SDK): the owner or an admin; doing it
    twice changes nothing, as in Determined. An archived model takes no new version."""
    async with rt.sessions.begin() as session:
        model = await _find_model(session, ident, lock=True)
        _require_model_owner(principal, model)
        if model.archived != archived:
            model.archived = archived
            model.updated_at = utcnow()


async def delete_model(rt: RuntimeCore, principal: Principal, ident: str) -> None:
    """The model and all its versions; the checkpoints stay (and become collectable again)."""
    async with rt.sessions.begin() as session:
        model = await _find_model(session, ident, lock=True)
        _require_model_owner(principal, model)
        await session.execute(delete(ModelVersion).where(ModelVersion.model_id == model.id))
        await session.delete(model)


# ---- versions -------------------------------------------------------------------------------
async def register_version(rt: RuntimeCore, user: AuthedUser, ident: str,
                           data: PostModelVersionRequest) -> VersionView:
    ckpt_uuid = data.checkpoint_uuid
    model_name = data.model_name
    name = data.name or ""
    comment = data.comment or ""
    notes = data.notes or ""
    metadata = _metadata(data.metadata, "metadata") or {}
    labels = _labels(data.labels) or []
    async with rt.sessions.begin() as session:
        model = await _find_model(session, ident, lock=True)
        _require_model_owner(user, model)
        if model_name not in (None, "", model.name, str(model.id)):
            raise BadRequest(f"modelName: {model_name!r} does not match the model of the path, {model.name!r}")
        if model.archived:  # Determined's rule
            raise BadRequest(f"model {model.name!r} is archived and cannot register new versions")
        # Locked like checkpoint GC locks the rows it may delete: whichever comes second sees the
        # other's outcome (a version that protects the checkpoint, or a checkpoint being deleted).
        ckpt = await session.get(Checkpoint, ckpt_uuid, with_for_update=True)
        if ckpt is None:
            raise NotFound(f"checkpointUuid: checkpoint {ckpt_uuid} not found")
        if ckpt.state != REGISTRABLE_STATE:
            raise BadRequest(f"checkpointUuid: checkpoint {ckpt_uuid} is {ckpt.state}; "
                             f"only a {REGISTRABLE_STATE} checkpoint can be registered")
        latest = await session.scalar(select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model.id))
        now = utcnow()
        version = ModelVersion(model_id=model.id, version=(latest or 0) + 1, checkpoint_uuid=ckpt_uuid, name=name,
                               comment=comment, notes=notes, metadata_=metadata, labels=labels, owner_id=user.id,
                               created_at=now, updated_at=now)
        session.add(version)
        model.updated_at = now
        await session.flush()
        mview = await _model_view(session, model)
        return (await _version_views(session, mview, [version]))[0]


async def list_versions(rt: RuntimeCore, ident: str, sort_by: str | None,
                        order_by: str | None) -> tuple[ModelView, list[VersionView]]:
    sort_key = VERSION_SORTS.get(sort_by or "SORT_BY_UNSPECIFIED")
    if sort_key is None:
        raise BadRequest(f"sortBy: must be one of {', '.join(VERSION_SORTS)}, got {sort_by!r}")
    descending = _order(order_by)
    async with rt.sessions() as session:
        model = await _find_model(session, ident)
        mview = await _model_view(session, model)
        versions = list((await session.scalars(select(ModelVersion).where(ModelVersion.model_id == model.id)
                                               .order_by(ModelVersion.version))).all())
        views = await _version_views(session, mview, versions)
    return mview, sorted(views, key=sort_key, reverse=descending)


async def get_version(rt: RuntimeCore, ident: str, number: int) -> VersionView:
    async with rt.sessions() as session:
        model = await _find_model(session, ident)
        version = await _find_version(session, model, number)
        return (await _version_views(session, await _model_view(session, model), [version]))[0]


async def patch_version(rt: RuntimeCore, principal: Principal, ident: str, number: int,
                        data: PatchModelVersion) -> VersionView:
    if data.checkpoint is not None:
        raise BadRequest("checkpoint: a version's checkpoint cannot be changed; register a new version instead")
    changes = {"name": data.name, "comment": data.comment, "notes": data.notes,
               "metadata_": _metadata(data.metadata, "metadata"), "labels": _labels(data.labels)}
    async with rt.sessions.begin() as session:
        model = await _find_model(session, ident, lock=True)
        _require_model_owner(principal, model)
        version = await _find_version(session, model, number)
        for attr, value in changes.items():
            if value is not None:
                setattr(version, attr, value)
        version.updated_at = utcnow()
        await session.flush()
        return (await _version_views(session, await _model_view(session, model), [version]))[0]


async def delete_version(rt: RuntimeCore, principal: Principal, ident: str, number: int) -> None:
    async with rt.sessions.begin() as session:
        model = await _find_model(session, ident, lock=True)
        _require_model_owner(principal, model)
        version = await _find_version(session, model, number)
        await session.delete(version)
        model.updated_at = utcnow()


# ---- the web UI's pages ---------------------------------------------------------------------
async def model_rows(session: AsyncSession, *, name: str, offset: int, limit: int) -> tuple[list[ModelRow], int]:
    """A page of models by name, those whose name contains ``name`` (any case; "" for every model),
    each with its owner's name and how many versions it has; and how many match."""
    counts = select(ModelVersion.model_id, func.count().label("n")).group_by(ModelVersion.model_id).subquery()
    where = func.lower(RegisteredModel.name).contains(name.lower(), autoescape=True) if name else None
    q = (select(RegisteredModel, User.username, func.coalesce(counts.c.n, 0))
         .join(User, User.id == RegisteredModel.owner_id)
         .outerjoin(counts, counts.c.model_id == RegisteredModel.id))
    count_q = select(func.count()).select_from(RegisteredModel)
    if where is not None:
        q, count_q = q.where(where), count_q.where(where)
    total = await session.scalar(count_q) or 0
    rows = (await session.execute(q.order_by(RegisteredModel.name).offset(offset).limit(limit))).all()
    return [ModelRow(m.name, m.description, list(m.labels or []), username, int(n), m.archived, m.updated_at)
            for m, username, n in rows], total


async def model_with_owner(session: AsyncSession, name: str) -> tuple[RegisteredModel, str] | None:
    """The model named ``name`` and its owner's name; None for no such model."""
    found = (await session.execute(
        select(RegisteredModel, User.username).join(User, User.id == RegisteredModel.owner_id)
        .where(RegisteredModel.name == name))).first()
    if found is None:
        return None
    model, owner = found
    return model, owner


async def version_rows(session: AsyncSession, model_id: int, *, offset: int,
                       limit: int) -> tuple[list[VersionRow], int]:
    """A page of the model's versions, newest first, and how many it has."""
    total = await session.scalar(select(func.count()).where(ModelVersion.model_id == model_id)) or 0
    rows = (await session.execute(
        select(ModelVersion, User.username, Checkpoint.state, Checkpoint.steps_completed, Checkpoint.trial_id,
               Checkpoint.experiment_id, Experiment.name)
        .join(User, User.id == ModelVersion.owner_id)
        .outerjoin(Checkpoint, Checkpoint.uuid == ModelVersion.checkpoint_uuid)
        .outerjoin(Experiment, Experiment.id == Checkpoint.experiment_id)
        .where(ModelVersion.model_id == model_id)
        .order_by(ModelVersion.version.desc()).offset(offset).limit(limit))).all()
    return [VersionRow(v.version, v.name, v.comment, list(v.labels or []), username, v.created_at,
                       v.checkpoint_uuid, state, steps, trial_id, exp_id, exp_name)
            for v, username, state, steps, trial_id, exp_id, exp_name in rows], total
