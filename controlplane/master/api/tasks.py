"""Tasks: the context download a task starts with, the task list `det slot list` reads, and one
task as Determined answers it: ``GET /api/v1/tasks/{id}`` (``v1GetTaskResponse``: its type, times
and allocations with ``isReady``, which `det shell start`, `det notebook start` and `det
tensorboard start` wait on) and ``GET /api/v1/tasks/{id}/logs`` (NDJSON lines ``{"result":
v1TaskLogsResponse}``, what `det cmd run`, `det cmd logs` and `det task logs` print; ``follow``
keeps the stream open until the task has ended).

A task is a trial's (``<experiment>.<uuid>``) or a job's: a command's, shell's, notebook's or
TensorBoard's task id is its own id. Anyone who may read the work reads its task and its logs (the
rule of the trial and command answers: ``VIEW``); a task token only its own task.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, cast

import msgspec
from litestar import get
from litestar.params import Parameter, QueryParameter
from litestar.response import Stream

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import principal_of, require_task, runtime_of
from controlplane.master.api.logs import LEVELS, log_stream
from controlplane.master.api.pai import AfterQuery
from controlplane.master.api.params import TaskId
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.db.models import TaskLog
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import commands
from controlplane.master.services import logs as log_svc
from controlplane.master.services import tasks as tasks_svc
from controlplane.master.services.logs import NO_NUL
from controlplane.master.services.paging import MAX_INT64
from controlplane.master.stream_slots import take_slot

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


class V1Allocation(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Allocation."""

    task_id: str
    allocation_id: str
    state: str  # taskv1.State
    is_ready: bool
    start_time: str | None
    end_time: str | None
    slots: int
    exit_reason: str | None
    status_code: int | None


class V1Task(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Task."""

    task_id: str
    task_type: str  # v1TaskType
    allocations: list[V1Allocation]
    start_time: str
    end_time: str | None


class GetTaskResponse(msgspec.Struct, kw_only=True):
    task: V1Task


@get("/api/v1/tasks/{task_id:str}", operation_id="GetTask", opt=opt(Action.VIEW, ("task", "task_id")),
     tags=["tasks"])
async def get_task(request: AnyRequest, task_id: TaskId) -> GetTaskResponse:
    """One task: its type, start and end, and its allocations, oldest first."""
    require_task(principal_of(request), task_id)
    rt = runtime_of(request)
    view = await tasks_svc.task_view(rt, task_id)
    allocations = [V1Allocation(
        task_id=a.task_id, allocation_id=a.id, state=tasks_svc.ALLOCATION_STATES.get(a.state, "STATE_UNSPECIFIED"),
        is_ready=await tasks_svc.is_ready(rt, view, a), start_time=iso(a.created_at), end_time=iso(a.ended_at),
        slots=a.slots_needed, exit_reason=a.exit_reason or None, status_code=a.exit_code) for a in view.allocations]
    return GetTaskResponse(task=V1Task(task_id=view.task_id, task_type=view.task_type, allocations=allocations,
                                       start_time=iso(view.start_time) or "", end_time=iso(view.end_time)))


class V1TaskLogsResponse(msgspec.Struct, rename="camel", kw_only=True):
    """One line of a task's log (Determined's v1TaskLogsResponse)."""

    id: str
    task_id: str
    allocation_id: str
    agent_id: str
    container_id: str
    rank_id: int | None
    timestamp: str | None
    level: str
    log: str
    source: str
    stdtype: str
    message: str


class TaskLogsLine(msgspec.Struct, kw_only=True):
    result: V1TaskLogsResponse


_encoder = msgspec.json.Encoder()
LOG_PAGE = 1000
FOLLOW_READ_S = 1.0  # a follower reads new lines at most this often
END_GRACE_S = 2.0  # after its end, lines a task sent last may still land (Determined waits as long)
Texts = Annotated[list[str] | None, Parameter(max_items=64)]
Order = Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"]


def _line(row: Any) -> bytes:
    return _encoder.encode(TaskLogsLine(result=V1TaskLogsResponse(
        id=str(row.id), task_id=row.task_id, allocation_id=row.allocation_id, agent_id=row.agent_id,
        container_id=row.allocation_id, rank_id=row.rank_id, timestamp=iso(row.timestamp), level=row.level,
        log=row.log, source=row.source, stdtype=row.stdtype, message=log_svc.format_message(row)))) + b"\n"


def _when(text: str | None, field: str) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{field}: an RFC 3339 time such as 2021-10-26T23:17:12Z, got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _texts(values: Sequence[str], field: str, max_len: int = 255) -> list[str]:
    if any(len(v) > max_len or "\x00" in v for v in values):
        raise BadRequest(f"{field}: each at most {max_len} characters, without NUL")
    return list(values)


@get("/api/v1/tasks/{task_id:str}/logs", operation_id="TaskLogs", opt=opt(Action.VIEW, ("task", "task_id")),
     tags=["tasks"], media_type="application/x-ndjson")
async def task_logs(
    request: AnyRequest, task_id: TaskId, follow: bool = False,
    limit: Annotated[int, Parameter(ge=0, le=MAX_INT64, description="at most this many lines; 0: all")] = 0,
    order_by: Annotated[Order, QueryParameter(name="orderBy")] = "ORDER_BY_ASC",
    allocation_ids: Annotated[list[str] | None, QueryParameter(name="allocationIds", max_items=64)] = None,
    agent_ids: Annotated[list[str] | None, QueryParameter(name="agentIds", max_items=64)] = None,
    container_ids: Annotated[list[str] | None, QueryParameter(name="containerIds", max_items=64)] = None,
    rank_ids: Annotated[list[int] | None, QueryParameter(name="rankIds", max_items=1024)] = None,
    stdtypes: Texts = None, sources: Texts = None, levels: Texts = None,
    timestamp_before: Annotated[str | None, QueryParameter(name="timestampBefore", max_length=64,
                                                           pattern=NO_NUL)] = None,
    timestamp_after: Annotated[str | None, QueryParameter(name="timestampAfter", max_length=64,
                                                          pattern=NO_NUL)] = None,
    search_text: Annotated[str | None, QueryParameter(name="searchText", max_length=1024, pattern=NO_NUL)] = None,
) -> Stream:
    """NDJSON lines ``{"result": v1TaskLogsResponse}``, oldest first (``ORDER_BY_DESC``: newest first,
    never followed); ``follow`` keeps the stream open until the task has ended."""
    require_task(principal_of(request), task_id)
    rt = runtime_of(request)
    if any(lv not in LEVELS for lv in levels or []):
        raise BadRequest(f"levels: must be among {', '.join(LEVELS)}")
    if any(not 0 <= r <= 2**31 - 1 for r in rank_ids or []):
        raise BadRequest("rankIds: each must be between 0 and 2147483647")
    filters = tasks_svc.LogFilters(
        allocation_ids=_texts(allocation_ids or [], "allocationIds"), agent_ids=_texts(agent_ids or [], "agentIds"),
        container_ids=_texts(container_ids or [], "containerIds"), rank_ids=rank_ids or [],
        stdtypes=_texts(stdtypes or [], "stdtypes", 16), sources=_texts(sources or [], "sources", 32),
        levels=levels or [], timestamp_before=_when(timestamp_before, "timestampBefore"),
        timestamp_after=_when(timestamp_after, "timestampAfter"))
    await tasks_svc.task_view(rt, task_id)  # 404 before the stream starts
    descending = order_by == "ORDER_BY_DESC"
    follow = follow and not descending
    slot = take_slot(rt.streams, rt.settings, principal_of(request)) if follow or limit <= 0 or limit > LOG_PAGE \
        else None

    async def lines() -> AsyncIterator[bytes]:
        sent, last_id = 0, None
        ended_at: float | None = None  # when the task was seen ended: read until the grace is over
        while True:
            page = LOG_PAGE if limit <= 0 else min(LOG_PAGE, limit - sent)
            stmt = tasks_svc.task_log_query(task_id, filters)
            if search_text:
                stmt = stmt.where(TaskLog.log.contains(search_text, autoescape=True))
            if descending:
                stmt = stmt.where(TaskLog.id < last_id) if last_id is not None else stmt
                stmt = stmt.order_by(TaskLog.id.desc())
            else:
                stmt = stmt.where(TaskLog.id > (last_id or 0)).order_by(TaskLog.id)
            rows = await log_svc.read_rows(rt, stmt.limit(page))
            if rows:
                yield b"".join(_line(row) for row in rows)
                sent, last_id = sent + len(rows), rows[-1].id
            if limit > 0 and sent >= limit:
                return
            if len(rows) == page:
                continue
            if not follow or (ended_at is not None and time.monotonic() - ended_at >= END_GRACE_S):
                return
            if ended_at is None and await tasks_svc.task_ended(rt, task_id):
                ended_at = time.monotonic()
            await asyncio.sleep(FOLLOW_READ_S)

    return log_stream(lines(), slot, f"task {task_id}")


ROUTES = [context_directory, list_tasks, tensorboard_scalars, get_task, task_logs]
