"""Config templates over Determined 0.38.1's paths (its client's ``bindings``): list, get, create, put, patch, delete.

``POST`` and ``PUT /api/v1/templates/{name}`` take a ``v1Template`` (``PUT`` creates or replaces
the config); ``PATCH`` takes the new config itself as the body, as Determined's client sends it.
Reading needs a signed-in user; creating the CREATE action; changing or deleting the owner or an
admin (checked by the service once it has loaded the template).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import delete, get, patch, post, put
from litestar.params import Parameter, QueryParameter

from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import ListLimit, ListOffset, OrderBy, QueryText, SortBy
from controlplane.master.api.requests import path_int
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.authz import Action, opt
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import templates as svc

TEMPLATE = "/api/v1/templates/{template_name:str}"
TemplateName = Annotated[str, Parameter(min_length=1, max_length=255, pattern=svc.NAME_PATTERN,
                                        description="the template's name")]
WorkspaceIds = Annotated[list[str] | None, QueryParameter(name="workspaceIds", max_items=1000)]
SORTS = ("SORT_BY_UNSPECIFIED", "SORT_BY_NAME")
ORDERS = {"ORDER_BY_UNSPECIFIED": False, "ORDER_BY_ASC": False, "ORDER_BY_DESC": True}
# Bounds the JSON decode before the config's own cap (max_config_bytes, 1 MiB by default) is checked.
MAX_BODY = 16 * 1024 * 1024


@get("/api/v1/templates", operation_id="GetTemplates", opt=opt(Action.VIEW), tags=["templates"])
async def list_templates(request: AnyRequest, limit: ListLimit = 0, offset: ListOffset = 0, name: QueryText = None,
                         sort_by: SortBy = None, order_by: OrderBy = None,
                         workspace_ids: WorkspaceIds = None) -> svc.TemplatesResponse:
    if (sort_by or "SORT_BY_UNSPECIFIED") not in SORTS:
        raise BadRequest(f"sortBy: must be one of {', '.join(SORTS)}, got {sort_by!r}")
    if (order_by or "ORDER_BY_UNSPECIFIED") not in ORDERS:
        raise BadRequest(f"orderBy: must be one of {', '.join(ORDERS)}, got {order_by!r}")
    return await svc.list_templates(runtime_of(request), offset=offset, limit=limit, name=name or None,
                                    descending=ORDERS[order_by or "ORDER_BY_UNSPECIFIED"],
                                    workspace_ids=[path_int(w, "workspaceIds") for w in workspace_ids or []])


@get(TEMPLATE, operation_id="GetTemplate", opt=opt(Action.VIEW), tags=["templates"])
async def get_template(request: AnyRequest, template_name: TemplateName) -> svc.TemplateResponse:
    return svc.TemplateResponse(template=await svc.get_template(runtime_of(request), template_name))


@post(TEMPLATE, operation_id="PostTemplate", opt=opt(Action.CREATE), tags=["templates"], status_code=200,
      request_max_body_size=MAX_BODY)
async def create_template(request: AnyRequest, template_name: TemplateName,
                          data: svc.TemplateRequest) -> svc.TemplateResponse:
    tpl = await svc.create_template(runtime_of(request), user_of(request), template_name, data.body())
    return svc.TemplateResponse(template=tpl)


@put(TEMPLATE, operation_id="PutTemplate", opt=opt(Action.EDIT), tags=["templates"],
     request_max_body_size=MAX_BODY)
async def put_template(request: AnyRequest, template_name: TemplateName,
                       data: svc.TemplateRequest) -> svc.TemplateResponse:
    tpl = await svc.put_template(runtime_of(request), user_of(request), template_name, data.body())
    return svc.TemplateResponse(template=tpl)


@patch(TEMPLATE, operation_id="PatchTemplateConfig", opt=opt(Action.EDIT), tags=["templates"],
       request_max_body_size=MAX_BODY)
async def patch_config(request: AnyRequest, template_name: TemplateName, data: dict[str, Any]) -> svc.TemplateResponse:
    tpl = await svc.set_config(runtime_of(request), principal_of(request), template_name, data)
    return svc.TemplateResponse(template=tpl)


@delete(TEMPLATE, operation_id="DeleteTemplate", opt=opt(Action.EDIT), tags=["templates"], status_code=200)
async def delete_template(request: AnyRequest, template_name: TemplateName) -> EmptyResponse:
    await svc.delete_template(runtime_of(request), principal_of(request), template_name)
    return EmptyResponse()


ROUTES = [list_templates, get_template, create_template, put_template, patch_config, delete_template]
