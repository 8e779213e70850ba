"""The model registry pages: ``/models`` (models, paged, filtered by name) and ``/models/{name}``
(its versions, each with the checkpoint, trial and experiment behind it). Two or three queries a
page, one page of rows each.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ListOffset
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import models as registry
from controlplane.master.webui import render

MAX_PAGE = 200
PageLimit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description="rows per page")]
NameFilter = Annotated[str, Parameter(max_length=255, pattern=r"^[^\x00]*$",
                                      description="models whose name contains this (any case)")]
ModelName = Annotated[str, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00]+$",
                                     description="the model's name")]


def _self_url(request: AnyRequest) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


@get("/models", opt=opt(Action.VIEW), include_in_schema=False)
async def models_page(request: AnyRequest, name: NameFilter = "", limit: PageLimit = 50,
                      offset: ListOffset = 0) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        models, total = await registry.model_rows(session, name=name, offset=offset, limit=limit)
    return render.page(request, "models.html", models=models, total=total, name=name, limit=limit, offset=offset,
                       self_url=_self_url(request))


@get("/models/{model_name:str}", opt=opt(Action.VIEW), include_in_schema=False)
async def model_page(request: AnyRequest, model_name: ModelName, limit: PageLimit = 50,
                     offset: ListOffset = 0) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        found = await registry.model_with_owner(session, model_name)
        if found is None:
            response = render.page(request, "model.html", model=None, model_name=model_name, owner="", versions=[],
                                   total=0, limit=limit, offset=offset, self_url=_self_url(request))
            response.status_code = 404
            return response
        model, owner = found
        versions, total = await registry.version_rows(session, model.id, offset=offset, limit=limit)
    return render.page(request, "model.html", model=model, model_name=model.name, owner=owner, versions=versions,
                       total=total, limit=limit, offset=offset, self_url=_self_url(request))


ROUTES: list[Any] = [models_page, model_page]
