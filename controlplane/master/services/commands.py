"""Determined's commands, shells and notebooks: each runs as a one-task job of the OpenPAI machinery.

A launch's config (Determined's command config: ``entrypoint``, ``description``, ``resources.slots``
and ``resource_pool``, ``environment.image`` and ``environment_variables``, ``idle_timeout``) becomes
the job JSON of one role named after its kind, whose command the master writes:

- a command runs its ``entrypoint`` to completion with its logs;
- a shell waits; its task's SSH server (every job task has one) is what the owner opens;
- a notebook runs JupyterLab from the task environment at ``/proxy/<id>/``, reached through the
  master's proxy with the user's auth (on the task's own address, requiring the task's secret
  that only the proxy sends), and is stopped after ``idle_timeout`` without traffic.

Their ids are their job-queue ids (UUIDs, as Determined's task ids are). Answers carry Determined's
``v1Command``/``v1Shell``/``v1Notebook`` fields; a shell's key reaches only its owner (or an admin).
"""

from __future__ import annotations

import shlex
import time
import uuid
from typing import Annotated, Any

import anyio
import msgspec
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso, utcnow
from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain
from controlplane.master import proxy_sessions as task_proxy
from controlplane.master.authz import Action, allows, require_owner
from controlplane.master.db.models import Allocation, Experiment, Metric, PaiJob, Trial, User
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.orchestration import gang, pai_jobs, rendezvous
from controlplane.master.orchestration.transitions import record_initial
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import pai_jobs as pai_svc
from controlplane.master.services.experiment_requests import V1File
from controlplane.master.settings import parse_duration
from controlplane.state import allocation as A
from controlplane.state import pai_job as J

KINDS = ("command", "shell", "notebook", "tensorboard")
SERVED = pai_jobs.SERVED_KINDS  # reached through the master's proxy, stopped when idle
MAX_EXPERIMENTS = 100
TENSORBOARD_ENV = "DET_TENSORBOARD_EXPERIMENTS"  # the experiment ids a TensorBoard shows, "1,2"
DEFAULT_NOTEBOOK_IDLE_S = 30 * 60
MAX_CONFIG_BYTES = 256 * 1024
NOTEBOOK_PATH = "lab"
MAX_ENTRYPOINT = 64 * 1024


class LaunchRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1LaunchCommandRequest`` / ``v1LaunchShellRequest`` / ``v1LaunchNotebookRequest``."""

    config: dict[str, Any] = {}
    files: list[V1File] = []
    template_name: str | None = None
    # A TensorBoard's experiments (Determined's v1LaunchTensorboardRequest).
    experiment_ids: list[Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]] = []
    trial_ids: list[Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]] = []


def _config(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The fields this master uses, checked; unknown Determined fields are ignored as Determined's
    agents would ignore them here (bind mounts, ports, ...)."""
    try:
        check_plain(raw, Limits(max_bytes=MAX_CONFIG_BYTES, max_depth=16))
    except ConfigError as e:
        raise BadRequest(f"invalid config: {e}") from None
    entry = raw.get("entrypoint")
    if kind == "command":
        if isinstance(entry, list) and entry and all(isinstance(a, str) for a in entry):
            command = shlex.join(entry)
        elif isinstance(entry, str) and entry.strip():
            command = entry
        else:
            raise BadRequest("invalid config: entrypoint: required, a command string or a list of strings")
        if len(command) > MAX_ENTRYPOINT or "\x00" in command:
            raise BadRequest(f"invalid config: entrypoint: at most {MAX_ENTRYPOINT} characters, no NUL")
    else:
        command = ""
    resources = raw.get("resources") or {}
    env = raw.get("environment") or {}
    if not isinstance(resources, dict):
        raise BadRequest("invalid config: resources: must be a map")
    if not isinstance(env, dict):
        raise BadRequest("invalid config: environment: must be a map")
    slots = resources.get("slots", 0 if kind == "tensorboard" else 1)
    if isinstance(slots, bool) or not isinstance(slots, int) or not 0 <= slots <= 1024:
        raise BadRequest(f"invalid config: resources.slots: an integer from 0 to 1024, got {slots!r}")
    pool = resources.get("resource_pool") or "default"
    if not isinstance(pool, str) or len(pool) > 128:
        raise BadRequest("invalid config: resources.resource_pool: a pool name")
    image = env.get("image") or "default"
    if isinstance(image, dict):  # {cpu, cuda}: this cluster's environments are named alike per device
        image = image.get("cuda" if slots else "cpu") or image.get("cpu") or "default"
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise BadRequest(f"invalid config: environment.image: an environment name, got {image!r}")
    variables: dict[str, str] = {}
    for i, item in enumerate(env.get("environment_variables") or []):
        key, sep, value = str(item).partition("=")
        if not sep or not key.isidentifier() or key.startswith("PAI_"):
            raise BadRequest(f"invalid config: environment.environment_variables[{i}]: NAME=VALUE with a shell "
                             f"variable name (not PAI_*), got {item!r}")
        variables[key] = value
    description = raw.get("description") or ""
    if not isinstance(description, str) or len(description) > 1024:
        raise BadRequest("invalid config: description: a string of at most 1024 characters")
    idle = raw.get("idle_timeout")
    try:
        idle_s = int(parse_duration(idle, "idle_timeout")) if idle is not None else None
    except ValueError as e:
        raise BadRequest(f"invalid config: {e}") from None
    return {"command": command, "slots": slots, "pool": pool, "image": image, "env": variables,
            "description": description, "idle_s": idle_s}


def _task_command(kind: str, cfg: dict[str, Any], job_id: str) -> str:
    if kind == "command":
        return cfg["command"]
    if kind == "shell":
        return "exec sleep infinity"  # the task's SSH server is the shell; it runs until killed
    if kind == "tensorboard":
        return f"exec python3 -m controlplane.exec.tensorboard_task --path-prefix /proxy/{job_id}"
    # On the task's own address (the agent's: loopback on a local cluster), where only the proxy
    # goes, and behind the task's secret (JUPYTER_TOKEN, kept off the command line), which the
    # proxy adds to every request: another task or the network gets 403, never a terminal.
    return (f': "${{{task_proxy.SECRET_ENV}:?the master gave this notebook no proxy secret}}"; '
            f'JUPYTER_TOKEN="${task_proxy.SECRET_ENV}" exec python3 -m jupyterlab --no-browser '
            '--ip "${PAI_CONTAINER_HOST_IP:-127.0.0.1}" --port "$PAI_CONTAINER_HOST_http_PORT_LIST" '
            f"--ServerApp.base_url=/proxy/{job_id}/ --ServerApp.password= "
            "--ServerApp.allow_remote_access=True --ServerApp.disable_check_xsrf=False")


def job_json(kind: str, name: str, cfg: dict[str, Any], job_id: str, code: bool) -> dict[str, Any]:
    """The one-task OpenPAI job a launch runs as."""
    out: dict[str, Any] = {
        "jobName": name, "image": cfg["image"], "virtualCluster": cfg["pool"],
        "taskRoles": [{"name": kind, "taskNumber": 1, "cpuNumber": 1, "memoryMB": 1024,
                       "gpuNumber": cfg["slots"], "command": _task_command(kind, cfg, job_id)}],
        "jobEnvs": dict(cfg["env"]),
    }
    if code:
        out["codeDir"] = "."
    return out


async def _experiments(rt: MasterRuntime, kind: str, body: LaunchRequest) -> list[int]:
    if kind != "tensorboard":
        if body.experiment_ids or body.trial_ids:
            raise BadRequest(f"experimentIds: only a TensorBoard shows experiments, not a {kind}")
        return []
    if body.trial_ids:
        raise BadRequest("trialIds: give the trials' experiments (experimentIds); a TensorBoard here shows whole "
                         "experiments")
    if not body.experiment_ids or len(body.experiment_ids) > MAX_EXPERIMENTS:
        raise BadRequest(f"experimentIds: one to {MAX_EXPERIMENTS} experiment ids")
    ids = list(dict.fromkeys(body.experiment_ids))
    async with rt.sessions() as session:
        found = set((await session.scalars(select(Experiment.id).where(Experiment.id.in_(ids)))).all())
    missing = [i for i in ids if i not in found]
    if missing:
        raise BadRequest(f"experimentIds: no experiment {', '.join(map(str, missing))}")
    return ids


async def launch(rt: MasterRuntime, user: AuthedUser, kind: str, body: LaunchRequest) -> dict[str, Any]:
    cfg = _config(kind, body.config)
    experiments = await _experiments(rt, kind, body)
    if experiments:
        cfg["env"][TENSORBOARD_ENV] = ",".join(map(str, experiments))
    job_id = str(uuid.uuid4())
    name = f"{kind}-{job_id}"
    raw = job_json(kind, name, cfg, job_id, bool(body.files))
    job, _, archive, digest = await anyio.to_thread.run_sync(pai_svc.prepare, raw, list(body.files), True)
    pai_svc.check_pool(rt, job)
    idle = cfg["idle_s"] if cfg["idle_s"] is not None else (DEFAULT_NOTEBOOK_IDLE_S if kind in SERVED else None)
    row = PaiJob(kind=kind, description=cfg["description"] or f"{kind.capitalize()} ({name})", idle_timeout_s=idle,
                 name=name, owner_id=user.id, state=J.WAITING, spec=raw, code=archive, code_hash=digest,
                 resource_pool=cfg["pool"], job_id=job_id, priority=None, queue_position=time.time(), attempt=1,
                 exit_reason="", created_at=utcnow(), ssh_key=rendezvous.new_ssh_key(),
                 ssh_host_key=rendezvous.new_ssh_key())
    async with rt.orchestrator.transaction() as session:
        session.add(row)
        await session.flush()
        record_initial(session, row, f"{kind} launched")
        pai_jobs.queue_attempt(session, row, "launched")
    rt.orchestrator.wake()
    return await get(rt, user, kind, job_id)


def _state(job: PaiJob, alloc: Allocation | None) -> str:
    if J.PAI_JOB.is_terminal(job.state):
        return "STATE_TERMINATED"
    if alloc is None or alloc.state == A.PENDING:
        return "STATE_QUEUED"
    return "STATE_RUNNING" if alloc.state == A.RUNNING else "STATE_STARTING"


def _exit_status(job: PaiJob, alloc: Allocation | None) -> str:
    """Determined's wording: how the task ended (the job's completion-policy text is OpenPAI's)."""
    if not J.PAI_JOB.is_terminal(job.state):
        return ""
    if job.state == J.STOPPED:
        return f"killed: {job.exit_reason}" if job.exit_reason else "killed"
    if alloc is not None and alloc.exit_code is not None:
        return f"exited with code {alloc.exit_code}"
    return (alloc.exit_reason if alloc is not None else "") or job.exit_reason


def _answer(job: PaiJob, username: str, alloc: Allocation | None, principal: Principal) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.job_id, "description": job.description, "state": _state(job, alloc), "container": None,
        "username": username, "userId": job.owner_id, "displayName": username, "resourcePool": job.resource_pool,
        "exitStatus": _exit_status(job, alloc), "jobId": job.job_id, "workspaceId": 1,
        "startTime": iso(job.created_at), "taskId": alloc.task_id if alloc is not None else "",
        "allocationId": alloc.id if alloc is not None else "",
        "exitCode": alloc.exit_code if alloc is not None and alloc.state == A.TERMINATED else None,
    }
    entry = gang.first_rank(alloc)
    if job.kind == "notebook":
        out["serviceAddress"] = f"/proxy/{job.job_id}/{NOTEBOOK_PATH}"
    if job.kind == "tensorboard":
        out["serviceAddress"] = f"/proxy/{job.job_id}/"
        out["experimentIds"] = [int(i) for i in str(job.spec.get("jobEnvs", {}).get(TENSORBOARD_ENV, "")).split(",")
                                if i.isdigit()]
    if job.kind == "shell":
        spec = pai_jobs.parsed(job)
        ports = pai_svc.ports_by_label(spec.task_roles[0], entry.ports.pai if entry else [])
        out["addresses"] = ([{"hostIp": entry.address if entry else None,
                              "hostPort": int(ports["ssh"].split(",")[0])}] if ports.get("ssh") else [])
        out["hostPublicKey"] = rendezvous.public_key_line(job.ssh_host_key)
        if allows(principal, Action.READ_OWN, job.owner_id):
            out["privateKey"] = job.ssh_key
            out["publicKey"] = rendezvous.public_key_line(job.ssh_key)
    return out


async def _load(rt: MasterRuntime, kind: str, job_id: str) -> tuple[PaiJob, str, Allocation | None]:
    async with rt.sessions() as session:
        row = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                     .where(PaiJob.job_id == job_id, PaiJob.kind == kind))).first()
        if row is None:
            raise NotFound(f"{kind} {job_id} not found")
        allocs = await pai_jobs.attempt_allocations(session, row[0])
    return row[0], row[1], (allocs[0] if allocs else None)


async def get(rt: MasterRuntime, principal: Principal, kind: str, job_id: str) -> dict[str, Any]:
    job, username, alloc = await _load(rt, kind, job_id)
    return _answer(job, username, alloc, principal)


async def list_kind(rt: MasterRuntime, principal: Principal, kind: str, offset: int, limit: int) -> dict[str, Any]:
    async with rt.sessions() as session:
        total = int(await session.scalar(select(func.count()).select_from(PaiJob).where(PaiJob.kind == kind)) or 0)
        rows = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                      .where(PaiJob.kind == kind).order_by(PaiJob.id.desc())
                                      .offset(offset).limit(limit))).all()
        out = []
        for job, username in rows:
            allocs = await pai_jobs.attempt_allocations(session, job)
            out.append(_answer(job, username, allocs[0] if allocs else None, principal))
    return {f"{kind}s": out, "pagination": {"offset": offset, "limit": limit, "startIndex": offset,
                                            "endIndex": offset + len(out), "total": total}}


async def kill(rt: MasterRuntime, principal: Principal, kind: str, job_id: str) -> dict[str, Any]:
    async with rt.orchestrator.transaction() as session:
        job = await session.scalar(select(PaiJob).where(PaiJob.job_id == job_id, PaiJob.kind == kind))
        if job is None:
            raise NotFound(f"{kind} {job_id} not found")
        require_owner(principal, Action.EDIT, job.owner_id, f"{kind} {job_id}")
        who = principal.username if isinstance(principal, AuthedUser) else "a task"
        await pai_jobs.stop(rt.orchestrator, session, job, who)
    rt.orchestrator.wake()
    return await get(rt, principal, kind, job_id)


async def logs(rt: MasterRuntime, kind: str, job_id: str, after: int, limit: int) -> pai_svc.JobLogs:
    job, username, _ = await _load(rt, kind, job_id)
    return await pai_svc.logs(rt, username, job.name, None, None, after, limit)


async def notebook_target(session: AsyncSession, task_id: str) -> task_proxy.ProxyTarget | None:
    """A running notebook's JupyterLab or TensorBoard, which serves under ``/proxy/<id>/`` itself."""
    job = await session.scalar(select(PaiJob).where(PaiJob.job_id == task_id, PaiJob.kind.in_(SERVED)))
    if job is None or J.PAI_JOB.is_terminal(job.state):
        return None
    allocs = await pai_jobs.attempt_allocations(session, job)
    if not allocs or allocs[0].state not in (A.ASSIGNED, A.RUNNING):
        return None
    entry = gang.resources_of(allocs[0])[0]
    http = pai_svc.ports_by_label(pai_jobs.parsed(job).task_roles[0], entry.ports.pai)
    if not http.get("http"):
        return None
    return task_proxy.ProxyTarget(owner_id=job.owner_id, host=entry.address or "127.0.0.1",
                                  port=int(http["http"].split(",")[0]), base_path=f"/proxy/{task_id}",
                                  headers=task_proxy.secret_headers(task_proxy.task_secret(job.ssh_host_key,
                                                                                           job.job_id)))


class Scalar(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    experiment_id: int
    trial_id: int
    group: str
    steps_completed: int
    metrics: dict[str, float]


class Scalars(msgspec.Struct, rename="camel", kw_only=True):
    scalars: list[Scalar]
    next_after: int


async def tensorboard_scalars(rt: MasterRuntime, task_id: str, after: int, limit: int) -> Scalars:
    """A page of the numeric metrics of a TensorBoard task's experiments, by report id (what its
    task turns into event files)."""
    async with rt.sessions() as session:
        job = await session.scalar(select(PaiJob).join(Allocation, Allocation.pai_job_id == PaiJob.id)
                                   .where(Allocation.task_id == task_id, PaiJob.kind == "tensorboard").limit(1))
        if job is None:
            raise NotFound(f"task {task_id} is not a TensorBoard")
        ids = [int(i) for i in str(job.spec.get("jobEnvs", {}).get(TENSORBOARD_ENV, "")).split(",") if i.isdigit()]
        rows = (await session.execute(
            select(Metric.id, Trial.experiment_id, Metric.trial_id, Metric.group, Metric.steps_completed,
                   Metric.metrics).join(Trial, Trial.id == Metric.trial_id)
            .where(Trial.experiment_id.in_(ids), Metric.id > after).order_by(Metric.id).limit(limit))).all()
    out = [Scalar(id=row_id, experiment_id=exp_id, trial_id=trial_id, group=group, steps_completed=steps,
                  metrics={k: float(v) for k, v in (values or {}).items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)})
           for row_id, exp_id, trial_id, group, steps, values in rows]
    return Scalars(scalars=out, next_after=out[-1].id if out else after)
