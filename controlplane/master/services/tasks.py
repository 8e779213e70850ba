"""Tasks as the task API reads them: a task's code (its experiment's model definition, or its
job's codeDir) with the owner who may read it, the live allocations ``det slot list`` shows, one
task with its allocations as Determined's ``GET /api/v1/tasks/{id}`` answers it (a trial's task, or
a job's: a command's task is the command's own id), and its log lines' query."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import Select, select

from controlplane.common.bounded_cache import BoundedCache
from controlplane.common.timeutil import utcnow
from controlplane.master.db.models import Allocation, Experiment, ExperimentContext, PaiJob, TaskLog, Trial
from controlplane.master.errors import NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.state import allocation as A
from controlplane.state import pai_job as J
from controlplane.state import trial as T


@dataclass(frozen=True)
class TaskCode:
    archive: bytes  # a tar.gz
    owner_id: int


@dataclass(frozen=True)
class LiveAllocation:
    allocation_id: str
    task_id: str
    agent_id: str | None
    slot_ids: list[int]
    state: str


async def code_of(rt: MasterRuntime, task_id: str) -> TaskCode:
    """The task's code and its owner; NotFound for an unknown task or one without code."""
    async with rt.sessions() as session:
        row = (await session.execute(
            select(ExperimentContext.model_definition, Experiment.owner_id)
            .join(Trial, Trial.experiment_id == Experiment.id)
            .join(ExperimentContext, ExperimentContext.experiment_id == Experiment.id)
            .where(Trial.task_id == task_id).limit(1))).first()
        if row is None:  # a command, notebook or OpenPAI task: its job's codeDir
            row = (await session.execute(
                select(PaiJob.code, PaiJob.owner_id).join(Allocation, Allocation.pai_job_id == PaiJob.id)
                .where(Allocation.task_id == task_id).limit(1))).first()
    if row is None or row[0] is None:
        raise NotFound(f"task {task_id} not found")
    return TaskCode(row[0], row[1])


async def live_allocations(rt: MasterRuntime) -> list[LiveAllocation]:
    """Allocations placed or running now (bounded by the cluster's slots and tasks)."""
    async with rt.sessions() as session:
        rows = (await session.execute(
            select(Allocation.id, Allocation.task_id, Allocation.agent_id, Allocation.slot_ids, Allocation.state)
            .where(Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all()
    return [LiveAllocation(alloc_id, task_id, agent_id, list(slot_ids or []), state)
            for alloc_id, task_id, agent_id, slot_ids, state in rows]


# ---- one task, as Determined's GET /api/v1/tasks/{id} answers it ---------------------------------
TASK_TYPES = {"command": "TASK_TYPE_COMMAND", "shell": "TASK_TYPE_SHELL", "notebook": "TASK_TYPE_NOTEBOOK",
              "tensorboard": "TASK_TYPE_TENSORBOARD", "pai": "TASK_TYPE_GENERIC"}
# An allocation's state as Determined's taskv1.State names it.
ALLOCATION_STATES = {A.PENDING: "STATE_QUEUED", A.ASSIGNED: "STATE_STARTING", A.RUNNING: "STATE_RUNNING",
                     A.TERMINATED: "STATE_TERMINATED"}
PROBE_TIMEOUT_S = 1.0
# allocation id -> True once its service answered: a running task's server does not stop answering
# by itself, and an ended one is not asked again.
_ready: BoundedCache[str, bool] = BoundedCache(10_000)


@dataclass(frozen=True)
class TaskView:
    task_id: str
    task_type: str
    owner_id: int
    start_time: datetime
    end_time: datetime | None  # None while it may still run
    allocations: list[Allocation]
    kind: str  # "trial", or the job's kind: "command", "shell", "notebook", "tensorboard", "pai"
    job_id: str | None  # a job's queue id (a command's own id)


async def task_view(rt: MasterRuntime, task_id: str) -> TaskView:
    """The task (a trial's, or a job's task) with its allocations, oldest first; NotFound if none."""
    async with rt.sessions() as session:
        allocs = list((await session.scalars(select(Allocation).where(Allocation.task_id == task_id)
                                             .order_by(Allocation.created_at, Allocation.id))).all())
        trial = (await session.execute(
            select(Trial.state, Trial.start_time, Trial.end_time, Experiment.owner_id)
            .join(Experiment, Experiment.id == Trial.experiment_id).where(Trial.task_id == task_id))).first()
        if trial is not None:
            state, start, end, owner = trial
            return TaskView(task_id, "TASK_TYPE_TRIAL", owner, start, end if T.TRIAL.is_terminal(state) else None,
                            allocs, "trial", None)
        job_pk = next((a.pai_job_id for a in allocs if a.pai_job_id is not None), None)
        job = await session.get(PaiJob, job_pk) if job_pk is not None else None
    if job is None:
        raise NotFound(f"task {task_id} not found")
    live = any(a.state != A.TERMINATED for a in allocs)
    end = None
    if J.PAI_JOB.is_terminal(job.state) and not live:
        end = job.completed_at or max((a.ended_at for a in allocs if a.ended_at is not None), default=utcnow())
    return TaskView(task_id, TASK_TYPES.get(job.kind, "TASK_TYPE_GENERIC"), job.owner_id, job.created_at, end,
                    allocs, job.kind, job.job_id)


async def task_ended(rt: MasterRuntime, task_id: str) -> bool:
    """Whether the task has ended for good (nothing of it runs or will run again)."""
    try:
        return (await task_view(rt, task_id)).end_time is not None
    except NotFound:
        return True


async def is_ready(rt: MasterRuntime, view: TaskView, alloc: Allocation) -> bool:
    """Determined's ``isReady``: the allocation runs and, for a shell, notebook or TensorBoard, its
    server answers (the SSH server's banner; the web server's HTTP answer through the address and
    secret the proxy uses), which the master checks itself when asked, with a short timeout."""
    if alloc.state != A.RUNNING:
        return False
    if view.kind not in ("shell", "notebook", "tensorboard") or _ready.get(alloc.id):
        return True
    if view.kind == "shell":
        ok = await _ssh_answers(rt, alloc)
    else:
        ok = await _http_answers(rt, view.task_id)
    if ok:
        _ready.put(alloc.id, True)
    return ok


async def _ssh_answers(rt: MasterRuntime, alloc: Allocation) -> bool:
    from controlplane.master.services import commands

    target = await commands.shell_target(rt, alloc.task_id)
    if target is None:
        return False
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*target), PROBE_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    try:
        banner = await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError):
        return False
    finally:
        writer.close()
    return banner.startswith(b"SSH-")


async def _http_answers(rt: MasterRuntime, task_id: str) -> bool:
    from controlplane.master.services import commands

    async with rt.sessions() as session:
        target = await commands.notebook_target(session, task_id)
    if target is None:
        return False
    host = f"[{target.host}]" if ":" in target.host else target.host
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            await client.get(f"http://{host}:{target.port}{target.path_for('/')}", headers=list(target.headers))
    except httpx.HTTPError:
        return False
    return True


# ---- a task's log lines ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LogFilters:
    """Determined's TaskLogsRequest filters."""

    allocation_ids: Sequence[str] = ()
    agent_ids: Sequence[str] = ()
    container_ids: Sequence[str] = ()
    rank_ids: Sequence[int] = ()
    stdtypes: Sequence[str] = ()
    sources: Sequence[str] = ()
    levels: Sequence[str] = ()
    timestamp_before: datetime | None = None
    timestamp_after: datetime | None = None


def task_log_query(task_id: str, f: LogFilters) -> Select[Any]:
    stmt = select(TaskLog).where(TaskLog.task_id == task_id)
    if f.allocation_ids:
        stmt = stmt.where(TaskLog.allocation_id.in_(list(f.allocation_ids)))
    if f.container_ids:  # a line's container is its allocation here
        stmt = stmt.where(TaskLog.allocation_id.in_(list(f.container_ids)))
    if f.agent_ids:
        stmt = stmt.where(TaskLog.agent_id.in_(list(f.agent_ids)))
    if f.rank_ids:
        stmt = stmt.where(TaskLog.rank_id.in_(list(f.rank_ids)))
    if f.stdtypes:
        stmt = stmt.where(TaskLog.stdtype.in_(list(f.stdtypes)))
    if f.sources:
        stmt = stmt.where(TaskLog.source.in_(list(f.sources)))
    if f.levels:
        stmt = stmt.where(TaskLog.level.in_(list(f.levels)))
    if f.timestamp_before is not None:
        stmt = stmt.where(TaskLog.timestamp <= f.timestamp_before)
    if f.timestamp_after is not None:
        stmt = stmt.where(TaskLog.timestamp > f.timestamp_after)
    return stmt
