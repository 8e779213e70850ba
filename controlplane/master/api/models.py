"""The model registry (reference §3 `det model`): models and their versions, Determined's paths.

`{name}` in a path is a model's name or its numeric id. Lists page with `limit` (0: the largest
page) and `offset` (never negative), answering Determined's `pagination`.
Changing a model or its versions needs the model's owner or an admin.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import delete, get, patch, post
from litestar.params import QueryParameter

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import (
    ListLimit,
    ListOffset,
    ModelRef,
    OrderBy,
    QueryText,
    SortBy,
    VersionNumber,
    page_limit,
)
from controlplane.master.api.requests import path_int
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.serializers import V1Model, V1ModelVersion, model_json, model_version_json, pagination
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import models as svc
from controlplane.master.services.paging import Pagination

MODEL = "/api/v1/models/{name:str}"
VERSION = "/api/v1/models/{name:str}/versions/{number:int}"
TextList = Annotated[list[str] | None, QueryParameter(max_items=1000)]


class ModelResponse(msgspec.Struct, rename="camel", kw_only=True):
    """PostModel, GetModel and PatchModel's answer."""

    model: V1Model


class GetModelsResponse(msgspec.Struct, rename="camel", kw_only=True):
    models: list[V1Model]
    pagination: Pagination


class ModelVersionResponse(msgspec.Struct, rename="camel", kw_only=True):
    """PostModelVersion, GetModelVersion and PatchModelVersion's answer."""

    model_version: V1ModelVersion


class GetModelVersionsResponse(msgspec.Struct, rename="camel", kw_only=True):
    model: V1Model
    model_versions: list[V1ModelVersion]
    pagination: Pagination


def _page(items: list[Any], offset: int, limit: int) -> tuple[list[Any], Pagination]:
    total = len(items)
    page = items[offset:offset + page_limit(limit)]
    return page, pagination(offset, limit, total, len(page))


def _ints(values: list[str] | None, name: str) -> list[int]:
    return [path_int(v, name) for v in values or []]


def _texts(values: list[str] | None, name: str) -> list[str]:
    for v in values or []:
        if "\x00" in v or len(v) > 255:
            raise BadRequest(f"{name}: at most 255 characters and no NUL, got {v[:40]!r}")
    return list(values or [])


@post("/api/v1/models", operation_id="PostModel", opt=opt(Action.CREATE), tags=["models"], status_code=200)
async def create_model(request: AnyRequest, data: svc.PostModelRequest) -> ModelResponse:
    view = await svc.create_model(runtime_of(request), user_of(request), data)
    return ModelResponse(model=model_json(view))


class ModelLabelsResponse(msgspec.Struct, rename="camel", kw_only=True):
    labels: list[str]


@get("/api/v1/model/labels", operation_id="GetModelLabels", opt=opt(Action.VIEW), tags=["models"])
async def model_labels(request: AnyRequest) -> ModelLabelsResponse:
    """Every label of the registry's models, most used first (the SDK's ``get_model_labels``)."""
    return ModelLabelsResponse(labels=await svc.model_labels(runtime_of(request)))


@get("/api/v1/models", operation_id="GetModels", opt=opt(Action.VIEW), tags=["models"])
async def list_models(
    request: AnyRequest, limit: ListLimit = 0, offset: ListOffset = 0, archived: bool | None = None,
    name: QueryText = None, description: QueryText = None, sort_by: SortBy = None, order_by: OrderBy = None,
    id: TextList = None, labels: TextList = None, users: TextList = None,  # Determined's name
    user_ids: Annotated[list[str] | None, QueryParameter(name="userIds", max_items=1000)] = None,
    workspace_names: Annotated[list[str] | None, QueryParameter(name="workspaceNames", max_items=1000)] = None,
    workspace_ids: Annotated[list[str] | None, QueryParameter(name="workspaceIds", max_items=1000)] = None,
) -> GetModelsResponse:
    ids = _ints(id, "id")
    flt = svc.ModelFilter(name=name or None, description=description or None,
                          model_id=ids[0] if ids else None, archived=archived, labels=_texts(labels, "labels"),
                          users=_texts(users, "users"), user_ids=_ints(user_ids, "userIds"),
                          workspace_names=_texts(workspace_names, "workspaceNames"),
                          workspace_ids=_ints(workspace_ids, "workspaceIds"))
    views = await svc.list_models(runtime_of(request), flt, sort_by, order_by)
    page, pages = _page(views, offset, limit)
    return GetModelsResponse(models=[model_json(v) for v in page], pagination=pages)


@get(MODEL, operation_id="GetModel", opt=opt(Action.VIEW), tags=["models"])
async def get_model(request: AnyRequest, name: ModelRef) -> ModelResponse:
    return ModelResponse(model=model_json(await svc.get_model(runtime_of(request), name)))


@patch(MODEL, operation_id="PatchModel", opt=opt(Action.EDIT), tags=["models"])
async def patch_model(request: AnyRequest, name: ModelRef, data: svc.PatchModel) -> ModelResponse:
    view = await svc.patch_model(runtime_of(request), principal_of(request), name, data)
    return ModelResponse(model=model_json(view))


@post(MODEL + "/archive", operation_id="ArchiveModel", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def archive_model(request: AnyRequest, name: ModelRef) -> EmptyResponse:
    await svc.set_archived(runtime_of(request), principal_of(request), name, True)
    return EmptyResponse()


@post(MODEL + "/unarchive", operation_id="UnarchiveModel", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def unarchive_model(request: AnyRequest, name: ModelRef) -> EmptyResponse:
    await svc.set_archived(runtime_of(request), principal_of(request), name, False)
    return EmptyResponse()


@delete(MODEL, operation_id="DeleteModel", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def delete_model(request: AnyRequest, name: ModelRef) -> EmptyResponse:
    await svc.delete_model(runtime_of(request), principal_of(request), name)
    return EmptyResponse()


@post(MODEL + "/versions", operation_id="PostModelVersion", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def register_version(request: AnyRequest, name: ModelRef,
                           data: svc.PostModelVersionRequest) -> ModelVersionResponse:
    view = await svc.register_version(runtime_of(request), user_of(request), name, data)
    return ModelVersionResponse(model_version=model_version_json(view))


@get(MODEL + "/versions", operation_id="GetModelVersions", opt=opt(Action.VIEW), tags=["models"])
async def list_versions(request: AnyRequest, name: ModelRef, limit: ListLimit = 0, offset: ListOffset = 0,
                        sort_by: SortBy = None, order_by: OrderBy = None) -> GetModelVersionsResponse:
    model, versions = await svc.list_versions(runtime_of(request), name, sort_by, order_by)
    page, pages = _page(versions, offset, limit)
    return GetModelVersionsResponse(model=model_json(model), model_versions=[model_version_json(v) for v in page],
                                    pagination=pages)


@get(VERSION, operation_id="GetModelVersion", opt=opt(Action.VIEW), tags=["models"])
async def get_version(request: AnyRequest, name: ModelRef, number: VersionNumber) -> ModelVersionResponse:
    view = await svc.get_version(runtime_of(request), name, number)
    return ModelVersionResponse(model_version=model_version_json(view))


@patch(VERSION, operation_id="PatchModelVersion", opt=opt(Action.EDIT), tags=["models"])
async def patch_version(request: AnyRequest, name: ModelRef, number: VersionNumber,
                        data: svc.PatchModelVersion) -> ModelVersionResponse:
    view = await svc.patch_version(runtime_of(request), principal_of(request), name, number, data)
    return ModelVersionResponse(model_version=model_version_json(view))


@delete(VERSION, operation_id="DeleteModelVersion", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def delete_version(request: AnyRequest, name: ModelRef, number: VersionNumber) -> EmptyResponse:
    await svc.delete_version(runtime_of(request), principal_of(request), name, number)
    return EmptyResponse()


ROUTES = [create_model, list_models, model_labels, get_model, patch_model, archive_model, unarchive_model, delete_model,
          register_version, list_versions, get_version, patch_version, delete_version]
