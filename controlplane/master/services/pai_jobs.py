"""OpenPAI jobs: submit, list, describe, stop, config and logs, in the shapes of OpenPAI's REST server.

Source for the answers: microsoft/pai ``docs/rest-server/API.md`` and ``src/rest-server`` (v1 job
routes): a submission answers 202 ``{"message": "update job NAME successfully"}``, a job name taken
by the same user 409, a list is an array of job summaries, a job's detail is ``{name, jobStatus,
taskRoles: {role: {taskRoleStatus, taskStatuses: [...]}}}``, times in epoch milliseconds.

A job's JSON is validated by ``controlplane.pai.spec`` off the event loop (every mistake named by
field path and rule, all in one 400); its ``image`` must be an environment the pool's agents offer
and its tasks must fit the pool's agents, so nothing is accepted that could never start. The job
and the allocations of its first attempt are stored in one transaction.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import msgspec
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Allocation, PaiJob, TaskLog, User
from controlplane.master.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from controlplane.master.orchestration import gang, pai_jobs, rendezvous
from controlplane.master.orchestration.transitions import record_initial
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.context import DIRECTORY, MAX_CONTEXT_BYTES, build_archive
from controlplane.master.services.environments import environment_problem
from controlplane.master.services.experiment_requests import V1File
from controlplane.master.services.jobs import pool_agents
from controlplane.master.services.jobs import waiting_reason as queue_reason
from controlplane.pai import fit as pai_fit
from controlplane.pai import spec as pai_spec
from controlplane.scheduler.environment import Image
from controlplane.state import allocation as A
from controlplane.state import pai_job as J

MAX_LOG_PAGE = 5000
CODE_DIR_LIMIT = 200 * 1024 * 1024  # OpenPAI's limit on a job's codeDir (a command's context keeps 95 MiB)
MEMORY_ENFORCEMENT = "RLIMIT_DATA of each task's command at its role's memoryMB (shmMB is not enforced)"
SSH_USER = "det"  # any name works: the tasks' SSH servers check only the key


class SubmitPaiJobRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``det pai submit``: the job JSON and its ``codeDir`` packed like an experiment's context."""

    job: dict[str, Any]
    code_files: list[V1File] = []


class Submitted(msgspec.Struct, kw_only=True):
    message: str
    warnings: list[str] = []


class JobSummary(msgspec.Struct, rename="camel", kw_only=True):
    """OpenPAI's job list entry."""

    name: str
    username: str
    state: str
    sub_state: str
    execution_type: str
    retries: int
    created_time: int
    completed_time: int | None
    app_exit_code: int | None
    virtual_cluster: str
    total_gpu_number: int
    total_task_number: int
    total_task_role_number: int
    waiting_reason: str = ""  # ours: why a WAITING job is not placed yet, as the scheduler's last pass saw it


class TaskStatus(msgspec.Struct, rename="camel", kw_only=True):
    task_index: int
    task_state: str
    container_id: str | None
    container_ip: str | None
    container_ports: dict[str, str]
    container_gpus: int
    container_exit_code: int | None
    container_exit_diagnostics: str


class TaskRoleStatus(msgspec.Struct, kw_only=True):
    name: str


class TaskRoleDetail(msgspec.Struct, rename="camel", kw_only=True):
    task_role_status: TaskRoleStatus
    task_statuses: list[TaskStatus]


class JobStatus(msgspec.Struct, rename="camel", kw_only=True):
    username: str
    state: str
    sub_state: str
    execution_type: str
    retries: int
    created_time: int
    completed_time: int | None
    app_launched_time: int | None
    app_completed_time: int | None
    app_exit_code: int | None
    app_exit_diagnostics: str
    virtual_cluster: str
    memory_enforced: bool
    memory_enforcement: str  # how memoryMB is enforced, "" where it is not
    waiting_reason: str = ""  # ours: why a WAITING job is not placed yet, as the scheduler's last pass saw it


class JobDetail(msgspec.Struct, rename="camel", kw_only=True):
    name: str
    job_status: JobStatus
    task_roles: dict[str, TaskRoleDetail]


class SshContainer(msgspec.Struct, rename="camel", kw_only=True):
    id: str  # <role>-<index>, the host alias tasks use for each other
    task_role: str
    task_index: int
    ssh_ip: str
    ssh_port: int


class SshInfo(msgspec.Struct, rename="camel", kw_only=True):
    """What the owner needs to reach the job's running tasks (OpenPAI's ``.../ssh``, with the key inline)."""

    containers: list[SshContainer]
    user: str
    private_key: str  # the job's key (OpenSSH format): keep it 0600
    host_public_key: str  # every task's host key: pin it
    known_hosts: list[str]  # "[ip]:port ssh-ed25519 ..." per container


class LogLine(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    task_role: str
    task_index: int
    attempt: int
    timestamp: float
    stdtype: str
    log: str


class JobLogs(msgspec.Struct, rename="camel", kw_only=True):
    logs: list[LogLine]
    next_after: int  # pass as ``after`` for the next page


def _ms(value: Any) -> int | None:
    value = aware(value)
    return int(value.timestamp() * 1000) if value is not None else None


def _parse(raw: dict[str, Any]) -> tuple[pai_spec.PaiJob, list[str]]:
    try:
        return pai_spec.parse_job(raw)
    except pai_spec.PaiJobError as e:
        raise BadRequest("invalid job: " + "; ".join(str(err) for err in e.errors)) from None


def prepare(raw: dict[str, Any], code_files: list[V1File],
            code_at_root: bool = False) -> tuple[pai_spec.PaiJob, list[str], bytes, str]:
    """CPU work of a submission: run in a worker thread. ``code_at_root``: the files are the working
    directory itself (a Determined command's context), not a ``codeDir`` copied into it."""
    job, warnings = _parse(raw)
    if job.code_dir and not code_files:
        raise BadRequest("codeDir: the directory must be uploaded with the job: submit it with `det pai submit`, "
                         "which packs codeDir like an experiment's context")
    if code_files and not job.code_dir:
        raise BadRequest("codeFiles: given, but the job names no codeDir")
    entries = [msgspec.to_builtins(f) for f in code_files]
    if job.code_dir and not code_at_root:  # OpenPAI copies codeDir into the working directory under its own name
        top = pai_spec.code_dir_name(job.code_dir)
        entries = [{"path": top, "type": DIRECTORY, "mode": 0o755}] + [
            {**e, "path": f"{top}/{str(e['path']).lstrip('/')}"} for e in entries]
    try:
        archive, digest = build_archive(entries, CODE_DIR_LIMIT if job.code_dir and not code_at_root else
                                        MAX_CONTEXT_BYTES)
    except ApiError as e:  # the context's checks name Determined's field; here the files are codeFiles
        e.message = e.message.replace("modelDefinition", "codeFiles")
        e.args = (e.message,)
        raise
    return job, warnings, archive, digest


def check_pool(rt: MasterRuntime, job: pai_spec.PaiJob, kind: str = "command") -> None:
    """Refuses (one 400 listing every reason, each naming its field) a job that could never be placed:
    no such pool, an environment or GPU model no agent offers, or tasks no agent could ever take
    (``controlplane.pai.fit``: fixed ports outside the agents' range or more tasks wanting one than
    hosts, more slots or CPUs than any agent has). ``kind``: a command's one-task job books no CPUs,
    and its message names its fields without the job prefix."""
    if rt.settings.pool(job.virtual_cluster) is None:
        known = ", ".join(sorted(p.name for p in rt.settings.pools))
        raise BadRequest(f"virtualCluster: no resource pool {job.virtual_cluster!r} (pools: {known})")
    found: list[str] = []
    image = Image(job.image, job.image, job.image)
    problem = environment_problem(image, job.virtual_cluster, list(rt.hub.connections.values()),
                                  max(r.gpu_number for r in job.task_roles))
    if problem:
        found.append(f"image: {problem}")
    mine = [c for c in rt.hub.connections.values() if c.pool == job.virtual_cluster]
    wanted = Image(gpu_type=job.gpu_type)
    models = {s.brand.lower() for c in mine for s in c.slots if s.brand}
    if job.gpu_type and mine and not wanted.fits_gpus(frozenset(models)):
        have = ", ".join(sorted(models)) or "none (CPU slots only)"
        found.append(f"gpuType: no agent of resource pool {job.virtual_cluster!r} has a GPU model matching "
                     f"{job.gpu_type!r} (models: {have})")
    else:
        agents, grows = pool_agents(rt, job.virtual_cluster, job.gpu_type)
        pool = pai_fit.Pool(job.virtual_cluster, agents, rendezvous.PORT_LOW, rendezvous.PORT_HIGH - 1, grows=grows,
                            books_cpus=kind == "pai")
        found += [str(e) for e in pai_fit.problems(job, pool)]
    if found:
        raise BadRequest(("invalid job: " if kind == "pai" else "") + "; ".join(found))


async def submit(rt: MasterRuntime, user: AuthedUser, username: str, raw: Any,
                 code_files: list[V1File] | None = None) -> Submitted:
    if username != user.username:
        raise Forbidden(f"username: jobs are submitted under one's own name ({user.username}), not {username!r}")
    if not isinstance(raw, dict):
        raise BadRequest(f"request body: the job must be a JSON object, got {type(raw).__name__}")
    job, warnings, archive, digest = await anyio.to_thread.run_sync(prepare, raw, list(code_files or []))
    check_pool(rt, job, "pai")
    row = PaiJob(name=job.job_name, owner_id=user.id, state=J.WAITING, spec=raw, code=archive, code_hash=digest,
                 resource_pool=job.virtual_cluster, job_id=str(uuid.uuid4()), priority=None,
                 queue_position=time.time(), attempt=1, exit_reason="", created_at=utcnow(),
                 ssh_key=rendezvous.new_ssh_key(), ssh_host_key=rendezvous.new_ssh_key())
    try:
        async with rt.orchestrator.transaction() as session:
            if await session.scalar(select(PaiJob.id).where(PaiJob.owner_id == user.id, PaiJob.name == job.job_name)):
                raise Conflict(f"jobName: job {job.job_name} already exists for user {user.username}")
            session.add(row)
            await session.flush()
            record_initial(session, row, "submitted")
            pai_jobs.queue_attempt(session, row, "attempt 1")
    except IntegrityError:  # the same name submitted twice at once
        raise Conflict(f"jobName: job {job.job_name} already exists for user {user.username}") from None
    rt.orchestrator.wake()
    return Submitted(message=f"update job {job.job_name} successfully", warnings=warnings)


async def _job(session: AsyncSession, username: str, name: str) -> tuple[PaiJob, str]:
    row = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                 .where(User.username == username, PaiJob.name == name))).first()
    if row is None:
        raise NotFound(f"job {name} of user {username} not found")
    return row[0], row[1]


def _sub_state(job: PaiJob) -> str:
    return {J.WAITING: "FRAMEWORK_WAITING", J.RUNNING: "APPLICATION_RUNNING"}.get(job.state, "FRAMEWORK_COMPLETED")


def waiting_reason(rt: MasterRuntime, job: PaiJob) -> str:
    """Why a WAITING job waits (the orchestrator's last pass); "" when it does not, or before a pass."""
    return queue_reason(rt, job.job_id) if job.state == J.WAITING else ""


def _summary(job: PaiJob, username: str, spec: pai_spec.PaiJob, waiting: str = "") -> JobSummary:
    return JobSummary(
        name=job.name, username=username, state=job.state, sub_state=_sub_state(job),
        execution_type="STOP" if job.state == J.STOPPED else "START", retries=job.attempt - 1,
        created_time=_ms(job.created_at) or 0, completed_time=_ms(job.completed_at),
        app_exit_code=_exit_code(job), virtual_cluster=job.resource_pool,
        total_gpu_number=sum(r.gpu_number * r.task_number for r in spec.task_roles),
        total_task_number=spec.total_tasks, total_task_role_number=len(spec.task_roles), waiting_reason=waiting)


def _exit_code(job: PaiJob) -> int | None:
    return {J.SUCCEEDED: 0, J.FAILED: 1, J.STOPPED: 214}.get(job.state)  # 214: the launcher's "stopped"


async def list_jobs(rt: MasterRuntime, username: str | None, offset: int, limit: int) -> list[JobSummary]:
    async with rt.sessions() as session:
        q = select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id).where(PaiJob.kind == "pai")
        if username:
            q = q.where(User.username == username)
        rows = (await session.execute(q.order_by(PaiJob.id.desc()).offset(offset).limit(limit))).all()
    return [_summary(job, name, pai_jobs.parsed(job), waiting_reason(rt, job)) for job, name in rows]


def _task_state(alloc: Allocation | None, job: PaiJob) -> str:
    if alloc is None or alloc.state == A.PENDING:
        return "WAITING"
    if alloc.state != A.TERMINATED:
        return "RUNNING"
    if alloc.exit_code == 0:
        return "SUCCEEDED"
    return "STOPPED" if pai_jobs.was_stopped(alloc) else "FAILED"


async def describe(rt: MasterRuntime, username: str, name: str) -> JobDetail:
    async with rt.sessions() as session:
        job, owner = await _job(session, username, name)
        allocs = await pai_jobs.attempt_allocations(session, job)
    spec = pai_jobs.parsed(job)
    by_key = {(a.task_role, a.task_index): a for a in allocs}
    roles: dict[str, TaskRoleDetail] = {}
    for role in spec.task_roles:
        statuses = []
        for i in range(role.task_number):
            alloc = by_key.get((role.name, i))
            entry = gang.first_rank(alloc)
            statuses.append(TaskStatus(
                task_index=i, task_state=_task_state(alloc, job),
                container_id=alloc.id if alloc is not None and alloc.state != A.PENDING else None,
                container_ip=entry.address if entry else None,
                container_ports=ports_by_label(role, entry.ports.pai if entry else []),
                container_gpus=role.gpu_number,
                container_exit_code=alloc.exit_code if alloc is not None else None,
                container_exit_diagnostics=(alloc.exit_reason or "") if alloc is not None else ""))
        roles[role.name] = TaskRoleDetail(task_role_status=TaskRoleStatus(name=role.name), task_statuses=statuses)
    s = _summary(job, owner, spec)
    status = JobStatus(
        username=owner, state=job.state, sub_state=s.sub_state, execution_type=s.execution_type, retries=s.retries,
        created_time=s.created_time, completed_time=s.completed_time, app_launched_time=_ms(job.launched_at),
        app_completed_time=_ms(job.completed_at), app_exit_code=s.app_exit_code,
        app_exit_diagnostics=job.exit_reason or "", virtual_cluster=job.resource_pool,
        memory_enforced=job.kind == "pai", memory_enforcement=MEMORY_ENFORCEMENT if job.kind == "pai" else "",
        waiting_reason=waiting_reason(rt, job))
    return JobDetail(name=job.name, job_status=status, task_roles=roles)


def ports_by_label(role: pai_spec.TaskRole, flat: list[int]) -> dict[str, str]:
    """The task's booked ports (stored flat, in the role's port order) by label, as "p1,p2"."""
    out: dict[str, str] = {}
    at = 0
    for p in role.ports:
        out[p.label] = ",".join(str(n) for n in flat[at:at + p.port_number])
        at += p.port_number
    return out if flat else {}


async def config(rt: MasterRuntime, principal: Principal, username: str, name: str) -> dict[str, Any]:
    async with rt.sessions() as session:
        job, _ = await _job(session, username, name)
    require_owner(principal, Action.READ_OWN, job.owner_id, f"job {name}")
    return dict(job.spec)


async def stop(rt: MasterRuntime, principal: Principal, username: str, name: str, value: str) -> Submitted:
    if value != "STOP":
        raise BadRequest(f"value: only STOP is supported (a stopped job is submitted again under a new name), "
                         f"got {value!r}")
    async with rt.orchestrator.transaction() as session:
        job, _ = await _job(session, username, name)
        require_owner(principal, Action.EDIT, job.owner_id, f"job {name}")
        who = principal.username if isinstance(principal, AuthedUser) else "a task"
        await pai_jobs.stop(rt.orchestrator, session, job, who)
    rt.orchestrator.wake()
    return Submitted(message=f"execute job {name} successfully")


async def logs(rt: MasterRuntime, username: str, name: str, role: str | None, index: int | None,
               after: int, limit: int) -> JobLogs:
    """A page of the job's task lines (every attempt), oldest first, after line id ``after``."""
    async with rt.sessions() as session:
        job, _ = await _job(session, username, name)
        spec = pai_jobs.parsed(job)
        if role is not None and role not in {r.name for r in spec.task_roles}:
            raise BadRequest(f"taskRole: job {name} has no task role {role!r}")
        # by task id; a command's one task had the OpenPAI form before it took the command's id
        names = {tid: (r, i) for r, i, _ in pai_jobs.task_order(spec)
                 for tid in {pai_jobs.task_id_of(job, r, i), pai_jobs.task_id(job.id, r, i)}}
        ids = [tid for tid, (r, i) in names.items() if (role is None or r == role) and (index is None or i == index)]
        rows = (await session.execute(
            select(TaskLog.id, TaskLog.task_id, TaskLog.allocation_id, TaskLog.timestamp, TaskLog.stdtype, TaskLog.log)
            .where(TaskLog.task_id.in_(ids), TaskLog.id > after).order_by(TaskLog.id).limit(limit))).all()
    out = [LogLine(id=row_id, task_role=names[tid][0], task_index=names[tid][1],
                   attempt=int(alloc_id.rpartition(".")[2] or 0) if alloc_id.rpartition(".")[2].isdigit() else 0,
                   timestamp=(aware(ts).timestamp() if aware(ts) else 0.0), stdtype=stdtype, log=text)
           for row_id, tid, alloc_id, ts, stdtype, text in rows]
    return JobLogs(logs=out, next_after=out[-1].id if out else after)


async def ssh_info(rt: MasterRuntime, principal: Principal, username: str, name: str) -> SshInfo:
    """The running tasks' SSH endpoints and the job's key: its owner's (or an admin's) only."""
    async with rt.sessions() as session:
        job, _ = await _job(session, username, name)
        require_owner(principal, Action.READ_OWN, job.owner_id, f"job {name}")
        allocs = await pai_jobs.attempt_allocations(session, job)
    spec = pai_jobs.parsed(job)
    host_public = rendezvous.public_key_line(job.ssh_host_key)
    containers = []
    for alloc in allocs:
        if alloc.state not in (A.ASSIGNED, A.RUNNING) or alloc.task_role is None:
            continue
        entry = gang.resources_of(alloc)[0]
        port = ports_by_label(spec.role(alloc.task_role), entry.ports.pai).get("ssh")
        if port:
            containers.append(SshContainer(id=f"{alloc.task_role}-{alloc.task_index}", task_role=alloc.task_role,
                                           task_index=alloc.task_index or 0, ssh_ip=entry.address or "",
                                           ssh_port=int(port.split(",")[0])))
    return SshInfo(containers=containers, user=SSH_USER, private_key=job.ssh_key, host_public_key=host_public,
                   known_hosts=[f"[{c.ssh_ip}]:{c.ssh_port} {host_public}" for c in containers])
