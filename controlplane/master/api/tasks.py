"""Tasks: the context download a task starts with, and the task list `det slot list` reads."""

from __future__ import annotations

import base64
from typing import Annotated, Any

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


@get("/api/v1/tasks/{task_id:str}/context_directory", operation_id="GetTaskContextDirectory",
     opt=opt(Action.READ_OWN, ("task", "task_id")), tags=["tasks"])
async def context_directory(request: AnyRequest, task_id: TaskId) -> dict[str, Any]:
    """The task's code: its owner's or an admin's, or its own task token's (READ_OWN, like GetModelDef)."""
    principal = principal_of(request)
    require_task(principal, task_id)
    code = await tasks_svc.code_of(runtime_of(request), task_id)
    require_owner(principal, Action.READ_OWN, code.owner_id, f"task {task_id}")
    return {"b64Tgz": base64.b64encode(code.archive).decode()}


@get("/api/v1/tasks", operation_id="GetTasks", opt=opt(Action.VIEW), tags=["tasks"])
async def list_tasks(request: AnyRequest) -> dict[str, Any]:
    summary = {
        a.allocation_id: {
            "taskId": a.task_id, "allocationId": a.allocation_id, "name": f"Trial task {a.task_id}",
            "resourcePool": "", "state": f"STATE_{a.state}",
            "resources": [{"containerId": a.allocation_id, "agentDevices": {a.agent_id: {"devices": [
                {"id": s} for s in a.slot_ids]}}}],
        }
        for a in await tasks_svc.live_allocations(runtime_of(request))
    }
    return {"allocationIdToSummary": summary}


@get("/api/v1/tasks/{task_id:str}/tensorboard/scalars", operation_id="GetTensorboardScalars",
     opt=opt(Action.TASK_READ, ("task", "task_id")), tags=["tasks"])
async def tensorboard_scalars(request: AnyRequest, task_id: TaskId, after: AfterQuery = 0,
                              limit: ScalarLimit = 1000) -> commands.Scalars:
    """What a TensorBoard task shows: its experiments' metrics, paged by report id."""
    require_task(principal_of(request), task_id)
    return await commands.tensorboard_scalars(runtime_of(request), task_id, after, limit)


ROUTES = [context_directory, list_tasks, tensorboard_scalars]
