"""The OpenPAI portal's reads (``webui/pages/pai.py``): a page of jobs, one job with its tasks, a
page of task log lines, a free name for a clone. Shapes and states are the REST API's
(``services/pai_jobs.py``); what differs is what is read: one page of rows per query, and never a
job's code archive or its SSH keys (a page polls every few seconds; the code may be 200 MB).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only

from controlplane.master.db.models import Allocation, PaiJob, TaskLog, User
from controlplane.master.orchestration import gang
from controlplane.master.orchestration import pai_jobs as orch
from controlplane.master.services import pai_jobs as svc
from controlplane.pai import spec as pai_spec
from controlplane.state import allocation as A
from controlplane.state import pai_job as J

STATES = (J.WAITING, J.RUNNING, J.SUCCEEDED, J.FAILED, J.STOPPED)
KIND = "pai"  # commands, shells and notebooks are pai_jobs rows too: not the portal's
# What the portal reads of a job: everything but ``code`` and the two SSH private keys.
_COLUMNS = load_only(PaiJob.id, PaiJob.kind, PaiJob.name, PaiJob.owner_id, PaiJob.state, PaiJob.spec,
                     PaiJob.resource_pool, PaiJob.job_id, PaiJob.attempt, PaiJob.exit_reason, PaiJob.created_at,
                     PaiJob.launched_at, PaiJob.completed_at, raiseload=True)


@dataclass(frozen=True)
class ListedJob:
    summary: svc.JobSummary  # the API's list entry
    owner_id: int


@dataclass(frozen=True)
class Task:
    role: str
    index: int
    status: svc.TaskStatus  # the API's task status
    attempt: int  # the attempt its allocation belongs to; 0 before one exists
    agent_id: str | None
    ssh_port: str | None  # the task's booked ``ssh`` port while it runs


@dataclass(frozen=True)
class JobView:
    job: PaiJob  # without code and keys
    owner: str
    spec: pai_spec.PaiJob
    detail: svc.JobDetail  # what GET /api/v1/user/{owner}/jobs/{name} answers
    tasks: list[Task]


def _where(state: str, username: str, name: str) -> list[ColumnElement[bool]]:
    out = [PaiJob.kind == KIND]
    if state:
        out.append(PaiJob.state == state)
    if username:
        out.append(User.username == username)
    if name:
        out.append(PaiJob.name.icontains(name, autoescape=True))
    return out


async def job_page(session: AsyncSession, *, state: str, username: str, name: str, offset: int,
                   limit: int) -> tuple[list[ListedJob], int]:
    """A page of OpenPAI jobs in every state, newest first, filtered (an empty filter is none), and how
    many match: one count and one page of rows."""
    where = _where(state, username, name)
    total = await session.scalar(select(func.count()).select_from(PaiJob).join(User, User.id == PaiJob.owner_id)
                                 .where(*where))
    rows = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                  .where(*where).options(_COLUMNS).order_by(PaiJob.id.desc())
                                  .offset(offset).limit(limit))).all()
    return [ListedJob(svc._summary(job, owner, orch.parsed(job)), job.owner_id) for job, owner in rows], int(total or 0)


async def find(session: AsyncSession, username: str, name: str) -> tuple[PaiJob, str] | None:
    """The OpenPAI job ``name`` of ``username`` (without code and keys) and its owner's name."""
    row = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                 .where(User.username == username, PaiJob.name == name, PaiJob.kind == KIND)
                                 .options(_COLUMNS))).first()
    return (row[0], row[1]) if row is not None else None


async def job_view(session: AsyncSession, username: str, name: str) -> JobView | None:
    """The job as ``GET .../jobs/{name}`` shows it, with each task's attempt, agent and SSH port."""
    found = await find(session, username, name)
    if found is None:
        return None
    job, owner = found
    allocs = await orch.attempt_allocations(session, job)
    spec = orch.parsed(job)
    by_key = {(a.task_role, a.task_index): a for a in allocs}
    roles: dict[str, svc.TaskRoleDetail] = {}
    tasks: list[Task] = []
    for role in spec.task_roles:
        statuses = []
        for i in range(role.task_number):
            alloc = by_key.get((role.name, i))
            status = _task_status(job, role, i, alloc)
            statuses.append(status)
            entry = gang.first_rank(alloc)
            live = status.task_state == "RUNNING"
            tasks.append(Task(role=role.name, index=i, status=status,
                              attempt=orch.attempt_of(alloc) if alloc is not None else 0,
                              agent_id=entry.agent_id if entry else None,
                              ssh_port=((status.container_ports.get("ssh") or "").split(",")[0] or None)
                              if live else None))
        roles[role.name] = svc.TaskRoleDetail(task_role_status=svc.TaskRoleStatus(name=role.name),
                                              task_statuses=statuses)
    s = svc._summary(job, owner, spec)
    job_status = svc.JobStatus(
        username=owner, state=job.state, sub_state=s.sub_state, execution_type=s.execution_type, retries=s.retries,
        created_time=s.created_time, completed_time=s.completed_time, app_launched_time=svc._ms(job.launched_at),
        app_completed_time=svc._ms(job.completed_at), app_exit_code=s.app_exit_code,
        app_exit_diagnostics=job.exit_reason or "", virtual_cluster=job.resource_pool, memory_enforced=True,
        memory_enforcement=svc.MEMORY_ENFORCEMENT)
    return JobView(job=job, owner=owner, spec=spec, detail=svc.JobDetail(name=job.name, job_status=job_status,
                                                                          task_roles=roles), tasks=tasks)


def _task_status(job: PaiJob, role: pai_spec.TaskRole, index: int, alloc: Allocation | None) -> svc.TaskStatus:
    entry = gang.first_rank(alloc)
    return svc.TaskStatus(
        task_index=index, task_state=svc._task_state(alloc, job),
        container_id=alloc.id if alloc is not None and alloc.state != A.PENDING else None,
        container_ip=entry.address if entry else None,
        container_ports=svc.ports_by_label(role, entry.ports.pai if entry else []),
        container_gpus=role.gpu_number,
        container_exit_code=alloc.exit_code if alloc is not None else None,
        container_exit_diagnostics=(alloc.exit_reason or "") if alloc is not None else "")


def task_ids(job: PaiJob, spec: pai_spec.PaiJob, role: str | None, index: int | None) -> dict[str, tuple[str, int]]:
    """The log task ids of the job's tasks (of ``role``, of ``index``, if given) and the task each names."""
    return {orch.task_id(job.id, r, i): (r, i) for r, i, _ in orch.task_order(spec)
            if (role is None or r == role) and (index is None or i == index)}


async def log_tail(session: AsyncSession, ids: Sequence[str], limit: int) -> list[TaskLog]:
    """The newest ``limit`` lines of these tasks, oldest first."""
    if not ids:
        return []
    rows = (await session.scalars(select(TaskLog).where(TaskLog.task_id.in_(list(ids)))
                                  .order_by(TaskLog.id.desc()).limit(limit))).all()
    return list(rows)[::-1]


async def log_after(session: AsyncSession, ids: Sequence[str], after: int, limit: int) -> list[TaskLog]:
    """The first ``limit`` lines of these tasks after line id ``after``."""
    if not ids:
        return []
    return list((await session.scalars(select(TaskLog).where(TaskLog.task_id.in_(list(ids)), TaskLog.id > after)
                                       .order_by(TaskLog.id).limit(limit))).all())


async def job_state(session: AsyncSession, job_id: int) -> str | None:
    return await session.scalar(select(PaiJob.state).where(PaiJob.id == job_id))


CLONE_TRIES = 20


async def clone_name(session: AsyncSession, owner_id: int, name: str) -> str:
    """A name none of ``owner_id``'s jobs has: ``name-2`` (``name-N`` goes on from N+1), the next free."""
    m = re.fullmatch(r"(.+)-(\d{1,6})", name)
    base, start = (m[1], int(m[2]) + 1) if m else (name, 2)
    candidates = []
    for n in range(start, start + CLONE_TRIES):
        suffix = f"-{n}"
        candidates.append(base[:pai_spec.MAX_NAME - len(suffix)] + suffix)
    taken = set((await session.scalars(select(PaiJob.name).where(PaiJob.owner_id == owner_id,
                                                                 PaiJob.name.in_(candidates)))).all())
    free = [c for c in candidates if c not in taken]
    if free:
        return free[0]
    suffix = f"-{secrets.token_hex(4)}"
    return base[:pai_spec.MAX_NAME - len(suffix)] + suffix
