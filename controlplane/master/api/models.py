"""The model registry (reference §3 `det model`): models and their versions, Determined's paths.

`{name}` in a path is a model's name or its numeric id. Lists page with `limit` (0: all) and
`offset` (negative: that many from the end), answering Determined's `pagination`.
"""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from litestar import Request, delete, get, patch, post

from controlplane.master.api.auth_guard import current_user, runtime_of
from controlplane.master.api.requests import path_int, read_json
from controlplane.master.api.serializers import model_json, model_version_json, pagination
from controlplane.master.errors import BadRequest
from controlplane.master.services import models as svc

MODEL = "/api/v1/models/{name:str}"
VERSION = "/api/v1/models/{name:str}/versions/{number:str}"


def _page(items: list, offset: int, limit: int) -> tuple[list, dict]:
    if limit < 0:
        raise BadRequest(f"limit: must be >= 0, got {limit}")
    total = len(items)
    start = max(total + offset, 0) if offset < 0 else offset
    page = items[start:start + limit] if limit > 0 else items[start:]
    return page, pagination(start, limit, total, len(page))


def _ints(request: Request, name: str) -> list[int]:
    return [path_int(v, name) for v in request.query_params.getall(name, [])]


def _version_number(number: str) -> int:
    value = path_int(number, "modelVersionNum")
    if value < 1:
        raise BadRequest(f"modelVersionNum: versions are numbered from 1, got {value}")
    return value


@post("/api/v1/models", operation_id="PostModel", opt=opt(Action.CREATE), tags=["models"], status_code=200)
async def create_model(request: Request) -> dict:
    user = await current_user(request)
    view = await svc.create_model(runtime_of(request), user, await read_json(request))
    return {"model": model_json(view)}


@get("/api/v1/models", operation_id="GetModels", opt=opt(Action.VIEW), tags=["models"])
async def list_models(request: Request, limit: int = 0, offset: int = 0, archived: bool | None = None) -> dict:
    await current_user(request)
    q = request.query_params
    ids = _ints(request, "id")
    flt = svc.ModelFilter(name=q.get("name") or None, description=q.get("description") or None,
                          model_id=ids[0] if ids else None, archived=archived, labels=q.getall("labels", []),
                          users=q.getall("users", []), user_ids=_ints(request, "userIds"),
                          workspace_names=q.getall("workspaceNames", []),
                          workspace_ids=_ints(request, "workspaceIds"))
    views = await svc.list_models(runtime_of(request), flt, q.get("sortBy"), q.get("orderBy"))
    page, pages = _page(views, offset, limit)
    return {"models": [model_json(v) for v in page], "pagination": pages}


@get(MODEL, operation_id="GetModel", opt=opt(Action.VIEW), tags=["models"])
async def get_model(request: Request, name: str) -> dict:
    await current_user(request)
    return {"model": model_json(await svc.get_model(runtime_of(request), name))}


@patch(MODEL, operation_id="PatchModel", opt=opt(Action.EDIT), tags=["models"])
async def patch_model(request: Request, name: str) -> dict:
    await current_user(request)
    view = await svc.patch_model(runtime_of(request), name, await read_json(request))
    return {"model": model_json(view)}


@delete(MODEL, operation_id="DeleteModel", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def delete_model(request: Request, name: str) -> dict:
    user = await current_user(request)
    await svc.delete_model(runtime_of(request), user, name)
    return {}


@post(MODEL + "/versions", operation_id="PostModelVersion", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def register_version(request: Request, name: str) -> dict:
    user = await current_user(request)
    view = await svc.register_version(runtime_of(request), user, name, await read_json(request))
    return {"modelVersion": model_version_json(view)}


@get(MODEL + "/versions", operation_id="GetModelVersions", opt=opt(Action.VIEW), tags=["models"])
async def list_versions(request: Request, name: str, limit: int = 0, offset: int = 0) -> dict:
    await current_user(request)
    q = request.query_params
    model, versions = await svc.list_versions(runtime_of(request), name, q.get("sortBy"), q.get("orderBy"))
    page, pages = _page(versions, offset, limit)
    return {"model": model_json(model), "modelVersions": [model_version_json(v) for v in page], "pagination": pages}


@get(VERSION, operation_id="GetModelVersion", opt=opt(Action.VIEW), tags=["models"])
async def get_version(request: Request, name: str, number: str) -> dict:
    await current_user(request)
    view = await svc.get_version(runtime_of(request), name, _version_number(number))
    return {"modelVersion": model_version_json(view)}


@patch(VERSION, operation_id="PatchModelVersion", opt=opt(Action.EDIT), tags=["models"])
async def patch_version(request: Request, name: str, number: str) -> dict:
    await current_user(request)
    view = await svc.patch_version(runtime_of(request), name, _version_number(number), await read_json(request))
    return {"modelVersion": model_version_json(view)}


@delete(VERSION, operation_id="DeleteModelVersion", opt=opt(Action.EDIT), tags=["models"], status_code=200)
async def delete_version(request: Request, name: str, number: str) -> dict:
    user = await current_user(request)
    await svc.delete_version(runtime_of(request), user, name, _version_number(number))
    return {}


ROUTES = [create_model, list_models, get_model, patch_model, delete_model, register_version, list_versions,
          get_version, patch_version, delete_version]
