"""The model registry pages: ``/models`` (models, paged, filtered by name) and ``/models/{name}``
(its versions, each with the checkpoint, trial and experiment behind it). Two or three queries a
page, one page of rows each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from litestar import Response, get
from litestar.params import Parameter
from sqlalchemy import func, select

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ListOffset
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Checkpoint, Experiment, ModelVersion, RegisteredModel, User
from controlplane.master.http_types import AnyRequest
from controlplane.master.webui import render

MAX_PAGE = 200
PageLimit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description="rows per page")]
NameFilter = Annotated[str, Parameter(max_length=255, pattern=r"^[^\x00]*$",
                                      description="models whose name contains this (any case)")]
ModelName = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00]+$",
                                     description="the model's name")]


@dataclass(frozen=True)
class ModelRow:
    name: str
    description: str
    labels: list[str]
    owner: str
    versions: int
    archived: bool
    updated: datetime


@dataclass(frozen=True)
class VersionRow:
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


def _self_url(request: AnyRequest) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


@get("/models", opt=opt(Action.VIEW), include_in_schema=False)
async def models_page(request: AnyRequest, name: NameFilter = "", limit: PageLimit = 50,
                      offset: ListOffset = 0) -> Response[Any]:
    counts = select(ModelVersion.model_id, func.count().label("n")).group_by(ModelVersion.model_id).subquery()
    where = func.lower(RegisteredModel.name).contains(name.lower(), autoescape=True) if name else None
    q = (select(RegisteredModel, User.username, func.coalesce(counts.c.n, 0))
         .join(User, User.id == RegisteredModel.owner_id)
         .outerjoin(counts, counts.c.model_id == RegisteredModel.id))
    count_q = select(func.count()).select_from(RegisteredModel)
    if where is not None:
        q, count_q = q.where(where), count_q.where(where)
    async with runtime_of(request).sessions() as session:
        total = await session.scalar(count_q) or 0
        rows = (await session.execute(q.order_by(RegisteredModel.name).offset(offset).limit(limit))).all()
    models = [ModelRow(m.name, m.description, list(m.labels or []), username, int(n), m.archived, m.updated_at)
              for m, username, n in rows]
    return render.page(request, "models.html", models=models, total=total, name=name, limit=limit, offset=offset,
                       self_url=_self_url(request))


@get("/models/{model_name:str}", opt=opt(Action.VIEW), include_in_schema=False)
async def model_page(request: AnyRequest, model_name: ModelName, limit: PageLimit = 50,
                     offset: ListOffset = 0) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        found = (await session.execute(
            select(RegisteredModel, User.username).join(User, User.id == RegisteredModel.owner_id)
            .where(RegisteredModel.name == model_name))).first()
        if found is None:
            response = render.page(request, "model.html", model=None, model_name=model_name, owner="", versions=[],
                                   total=0, limit=limit, offset=offset, self_url=_self_url(request))
            response.status_code = 404
            return response
        model, owner = found
        total = await session.scalar(select(func.count()).where(ModelVersion.model_id == model.id)) or 0
        rows = (await session.execute(
            select(ModelVersion, User.username, Checkpoint.state, Checkpoint.steps_completed, Checkpoint.trial_id,
                   Checkpoint.experiment_id, Experiment.name)
            .join(User, User.id == ModelVersion.owner_id)
            .outerjoin(Checkpoint, Checkpoint.uuid == ModelVersion.checkpoint_uuid)
            .outerjoin(Experiment, Experiment.id == Checkpoint.experiment_id)
            .where(ModelVersion.model_id == model.id)
            .order_by(ModelVersion.version.desc()).offset(offset).limit(limit))).all()
    versions = [VersionRow(v.version, v.name, v.comment, list(v.labels or []), username, v.created_at,
                           v.checkpoint_uuid, state, steps, trial_id, exp_id, exp_name)
                for v, username, state, steps, trial_id, exp_id, exp_name in rows]
    return render.page(request, "model.html", model=model, model_name=model.name, owner=owner, versions=versions,
                       total=total, limit=limit, offset=offset, self_url=_self_url(request))


ROUTES: list[Any] = [models_page, model_page]
