"""Tasks: the context download a task starts with, and the task list `det slot list` reads."""

from __future__ import annotations

import base64
from typing import Annotated, Any

from litestar import get
from litestar.params import Parameter
from sqlalchemy import select

from controlplane.master.api.auth_guard import principal_of, require_task, runtime_of
from controlplane.master.api.pai import AfterQuery
from controlplane.master.api.params import TaskId
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.db.models import Allocation, Experiment, PaiJob, Trial
from controlplane.master.errors import NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import commands
from controlplane.state import allocation as A

ScalarLimit = Annotated[int, Parameter(ge=1, le=10_000, description="reports per page")]


@get("/api/v1/tasks/{task_id:str}/context_directory", operation_id="GetTaskContextDirectory",
     opt=opt(Action.READ_OWN, ("task", "task_id")), tags=["tasks"])
async def context_directory(request: AnyRequest, task_id: TaskId) -> dict[str, Any]:
    """The task's code: its owner's or an admin's, or its own task token's (READ_OWN, like GetModelDef)."""
    principal = principal_of(request)
    require_task(principal, task_id)
    async with runtime_of(request).sessions() as session:
        row = (await session.execute(
            select(Experiment.model_definition, Experiment.owner_id).join(Trial, Trial.experiment_id == Experiment.id)
            .where(Trial.task_id == task_id).limit(1))).first()
        if row is None:  # a command, notebook or OpenPAI task: its job's codeDir
            row = (await session.execute(
                select(PaiJob.code, PaiJob.owner_id).join(Allocation, Allocation.pai_job_id == PaiJob.id)
                .where(Allocation.task_id == task_id).limit(1))).first()
    if row is None or row[0] is None:
        raise NotFound(f"task {task_id} not found")
    require_owner(principal, Action.READ_OWN, row[1], f"task {task_id}")
    return {"b64Tgz": base64.b64encode(row[0]).decode()}


@get("/api/v1/tasks", operation_id="GetTasks", opt=opt(Action.VIEW), tags=["tasks"])
async def list_tasks(request: AnyRequest) -> dict[str, Any]:
    async with runtime_of(request).sessions() as session:
        rows = (await session.execute(
            select(Allocation.id, Allocation.task_id, Allocation.agent_id, Allocation.slot_ids, Allocation.state)
            .where(Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all()
    summary = {
        alloc_id: {
            "taskId": task_id, "allocationId": alloc_id, "name": f"Trial task {task_id}",
            "resourcePool": "", "state": f"STATE_{state}",
            "resources": [{"containerId": alloc_id, "agentDevices": {agent_id: {"devices": [
                {"id": s} for s in (slot_ids or [])]}}}],
        }
        for alloc_id, task_id, agent_id, slot_ids, state in rows
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
