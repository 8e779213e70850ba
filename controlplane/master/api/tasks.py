"""Tasks: the context download a task starts with, and the task list `det slot list` reads."""

from __future__ import annotations

import base64
from typing import Annotated, cast

import msgspec
from litestar import get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import principal_of, require_task, runtime_of
from controlplane.master.api.pai import AfterQuery
from controlplane.master.api.params import TaskId
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import commands
from controlplane.master.services import tasks as tasks_svc

ScalarLimit = Annotated[int, Parameter(ge=1, le=10_000, description="reports per page")]


class ContextDirectoryResponse(msgspec.Struct, kw_only=True):
    b64_tgz: str = msgspec.field(name="b64Tgz")  # the task's code, a base64 tar.gz


class SlotDevice(msgspec.Struct, rename="camel", kw_only=True):
    id: int  # the slot's id on its agent


class ResourcesSummaryDevices(msgspec.Struct, rename="camel", kw_only=True):
    devices: list[SlotDevice]


class V1ResourcesSummary(msgspec.Struct, rename="camel", kw_only=True):
    container_id: str
    agent_devices: dict[str, ResourcesSummaryDevices]  # by agent id


class V1AllocationSummary(msgspec.Struct, rename="camel", kw_only=True):
    task_id: str
    allocation_id: str
    name: str
    resource_pool: str
    state: str
    resources: list[V1ResourcesSummary]


class GetTasksResponse(msgspec.Struct, rename="camel", kw_only=True):
    allocation_id_to_summary: dict[str, V1AllocationSummary]


@get("/api/v1/tasks/{task_id:str}/context_directory", operation_id="GetTaskContextDirectory",
     opt=opt(Action.READ_OWN, ("task", "task_id")), tags=["tasks"])
async def context_directory(request: AnyRequest, task_id: TaskId) -> ContextDirectoryResponse:
    """The task's code: its owner's or an admin's, or its own task token's (READ_OWN, like GetModelDef)."""
    principal = principal_of(request)
    require_task(principal, task_id)
    code = await tasks_svc.code_of(runtime_of(request), task_id)
    require_owner(principal, Action.READ_OWN, code.owner_id, f"task {task_id}")
    return ContextDirectoryResponse(b64_tgz=base64.b64encode(code.archive).decode())


@get("/api/v1/tasks", operation_id="GetTasks", opt=opt(Action.VIEW), tags=["tasks"])
async def list_tasks(request: AnyRequest) -> GetTasksResponse:
    summary = {
        a.allocation_id: V1AllocationSummary(
            task_id=a.task_id, allocation_id=a.allocation_id, name=f"Trial task {a.task_id}",
            resource_pool="", state=f"STATE_{a.state}",
            # placed (ASSIGNED, RUNNING): it has an agent
            resources=[V1ResourcesSummary(container_id=a.allocation_id, agent_devices={
                cast(str, a.agent_id): ResourcesSummaryDevices(devices=[SlotDevice(id=s) for s in a.slot_ids])})],
        )
        for a in await tasks_svc.live_allocations(runtime_of(request))
    }
    return GetTasksResponse(allocation_id_to_summary=summary)


@get("/api/v1/tasks/{task_id:str}/tensorboard/scalars", operation_id="GetTensorboardScalars",
     opt=opt(Action.TASK_READ, ("task", "task_id")), tags=["tasks"])
async def tensorboard_scalars(request: AnyRequest, task_id: TaskId, after: AfterQuery = 0,
                              limit: ScalarLimit = 1000) -> commands.Scalars:
    """What a TensorBoard task shows: its experiments' metrics, paged by report id."""
    require_task(principal_of(request), task_id)
    return await commands.tensorboard_scalars(runtime_of(request), task_id, after, limit)


ROUTES = [context_directory, list_tasks, tensorboard_scalars]
