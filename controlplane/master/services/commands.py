"""Determined's commands, shells and notebooks: each runs as a one-task job of the OpenPAI machinery.

A launch's config (Determined's command config: ``entrypoint``, ``description``, ``resources.slots``
and ``resource_pool``, ``environment.image`` and ``environment_variables``, ``idle_timeout``) becomes
the job JSON of one role named after its kind, whose command the master writes:

- a command runs its ``entrypoint`` to completion with its logs;
- a shell waits; its task's SSH server (every job task has one) is what the owner opens;
- a notebook runs JupyterLab from the task environment at ``/proxy/<id>/``, reached through the
  master's proxy with the user's auth (on the task's own address, requiring the task's secret
  that only the proxy sends), and is stopped after ``idle_timeout`` without traffic.

Their ids are their job-queue ids (UUIDs), and, as in Determined, also their task ids: their
allocations' ``task_id`` (``GET /api/v1/tasks/{id}`` and its logs). Answers carry Determined's
``v1Command``/``v1Shell``/``v1Notebook``/``v1Tensorboard`` fields and, for launch and get, the
``config`` they run with (secrets redacted); a shell's key reaches only its owner (or an admin).

An entrypoint of one string, or a list of one string, runs through the shell (what Determined's
``command-entrypoint.sh`` does with one argument: ``sh -c "$1"``), so ``det cmd run 'for x in a b; do
echo $x; done'`` works; a list of several runs as that argv. A TensorBoard shows whole experiments
(``experimentIds``) or chosen trials (``trialIds``, their experiments' other trials left out).
"""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Any

import anyio
import msgspec
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso, utcnow
from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain
from controlplane.config.merge import merge_template
from controlplane.master import proxy_sessions as task_proxy
from controlplane.master.authz import Action, allows, require_owner
from controlplane.master.db.models import Allocation, Experiment, Metric, PaiJob, Trial, User
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.orchestration import gang, pai_jobs, rendezvous
from controlplane.master.orchestration.transitions import record_initial
from controlplane.master.principals import AuthedUser, Principal
from controlplane.master.redaction import redact_config
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import pai_jobs as pai_svc
from controlplane.master.services import templates
from controlplane.master.services.experiment_requests import V1File
from controlplane.master.settings import parse_duration
from controlplane.state import allocation as A
from controlplane.state import pai_job as J

KINDS = ("command", "shell", "notebook", "tensorboard")
SERVED = pai_jobs.SERVED_KINDS  # reached through the master's proxy, stopped when idle
MAX_EXPERIMENTS = 100
TENSORBOARD_ENV = "DET_TENSORBOARD_EXPERIMENTS"  # the experiment ids a TensorBoard shows, "1,2"
TENSORBOARD_TRIALS_ENV = "DET_TENSORBOARD_TRIALS"  # its chosen trials, "3,4" (none: every trial)
MAX_TRIALS = 1000
SHELL_USER = "det"  # the user a shell's SSH server names (it takes any; Determined's agentUserGroup.user)
TASK_UID = 65534  # a sandboxed task's uid and gid (nobody)
DEFAULT_NOTEBOOK_IDLE_S = 30 * 60
MAX_CONFIG_BYTES = 256 * 1024
NOTEBOOK_PATH = "lab"
MAX_ENTRYPOINT = 64 * 1024


Id32 = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
TemplateName = Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^\x00]+$")]


class LaunchRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1Launch{Command,Shell,Notebook,Tensorboard}Request``. Its client sends an unset
    field as ``null`` (``det tensorboard start 3`` sends ``"trialIds": null``), and ``det cmd run``'s
    body names the template ``template_name``, the others ``templateName``."""

    config: dict[str, Any] | None = None
    files: list[V1File] | None = None
    template_name: TemplateName | None = None
    template_name_legacy: TemplateName | None = msgspec.field(default=None, name="template_name")
    workspace_id: Id32 | None = None  # every command runs in the default workspace (1)
    preview: bool | None = None  # only check the config and answer it; launch nothing
    # A TensorBoard's experiments and trials (Determined's v1LaunchTensorboardRequest).
    experiment_ids: list[Id32] | None = None
    trial_ids: list[Id32] | None = None


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
            # One argument is a shell command line (Determined's command-entrypoint.sh: sh -c "$1").
            command = entry[0] if len(entry) == 1 else shlex.join(entry)
            if not command.strip():
                raise BadRequest("invalid config: entrypoint: an empty command")
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


async def _shown(rt: MasterRuntime, kind: str, body: LaunchRequest) -> tuple[list[int], list[int]]:
    """A TensorBoard's experiments and its chosen trials (none: every trial of the experiments)."""
    experiment_ids, trial_ids = body.experiment_ids or [], body.trial_ids or []
    if kind != "tensorboard":
        if experiment_ids or trial_ids:
            field = "experimentIds" if experiment_ids else "trialIds"
            raise BadRequest(f"{field}: only a TensorBoard shows experiments and trials, not a {kind}")
        return [], []
    if not experiment_ids and not trial_ids:
        raise BadRequest("experimentIds: give experiment ids or trial ids (trialIds) to show")
    if len(experiment_ids) > MAX_EXPERIMENTS:
        raise BadRequest(f"experimentIds: at most {MAX_EXPERIMENTS} experiment ids")
    if len(trial_ids) > MAX_TRIALS:
        raise BadRequest(f"trialIds: at most {MAX_TRIALS} trial ids")
    exp_ids, trials = list(dict.fromkeys(experiment_ids)), list(dict.fromkeys(trial_ids))
    async with rt.sessions() as session:
        found = set((await session.scalars(select(Experiment.id).where(Experiment.id.in_(exp_ids)))).all())
        trial_exps: dict[int, int] = {trial_id: exp_id for trial_id, exp_id in (await session.execute(
            select(Trial.id, Trial.experiment_id).where(Trial.id.in_(trials)))).all()}
    missing = [i for i in exp_ids if i not in found]
    if missing:
        raise BadRequest(f"experimentIds: no experiment {', '.join(map(str, missing))}")
    missing = [i for i in trials if i not in trial_exps]
    if missing:
        raise BadRequest(f"trialIds: no trial {', '.join(map(str, missing))}")
    if trials and exp_ids:  # both: every trial of the experiments, and the trials named besides
        trials = [*trials, *(await _trials_of(rt, exp_ids))]
    return list(dict.fromkeys([*exp_ids, *trial_exps.values()])), list(dict.fromkeys(trials))


async def _trials_of(rt: MasterRuntime, experiment_ids: list[int]) -> list[int]:
    async with rt.sessions() as session:
        return list((await session.scalars(select(Trial.id).where(Trial.experiment_id.in_(experiment_ids))
                                           .order_by(Trial.id).limit(MAX_TRIALS))).all())


def _ids(job: PaiJob, env: str) -> list[int]:
    return [int(i) for i in str(job.spec.get("jobEnvs", {}).get(env, "")).split(",") if i.isdigit()]


def _effective(kind: str, raw: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The config it runs with, as its answers show it: what was sent (template merged), with what
    the master settled filled in (Determined answers its config with defaults filled)."""
    out = dict(raw)
    out["description"] = cfg["description"]
    resources = dict(raw.get("resources") or {})
    resources.update(slots=cfg["slots"], resource_pool=cfg["pool"])
    out["resources"] = resources
    environment = dict(raw.get("environment") or {})
    environment.setdefault("image", cfg["image"])
    out["environment"] = environment
    if kind in SERVED and cfg["idle_s"] is not None:
        out["idle_timeout"] = f"{cfg['idle_s']}s"
    return out


async def _with_template(rt: MasterRuntime, body: LaunchRequest) -> dict[str, Any]:
    raw = dict(body.config or {})
    names = [n for n in (body.template_name, body.template_name_legacy) if n]
    if len(set(names)) > 1:
        raise BadRequest(f"templateName: names {names[0]!r} but template_name names {names[1]!r}; give one")
    if not names:
        return raw
    merged = merge_template(raw, await templates.config_for_experiment(rt, names[0]))
    return merged if isinstance(merged, dict) else raw


async def launch(rt: MasterRuntime, user: AuthedUser, kind: str, body: LaunchRequest
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The new command, shell, notebook or TensorBoard and its config (with ``preview``: an empty
    answer and the config, nothing launched)."""
    given = await _with_template(rt, body)
    cfg = _config(kind, given)
    experiments, trials = await _shown(rt, kind, body)
    if experiments:
        cfg["env"][TENSORBOARD_ENV] = ",".join(map(str, experiments))
    if trials:
        cfg["env"][TENSORBOARD_TRIALS_ENV] = ",".join(map(str, trials))
    job_id = str(uuid.uuid4())
    name = f"{kind}-{job_id}"
    idle = cfg["idle_s"] if cfg["idle_s"] is not None else (DEFAULT_NOTEBOOK_IDLE_S if kind in SERVED else None)
    cfg["description"] = cfg["description"] or f"{kind.capitalize()} ({name})"
    effective = _effective(kind, given, {**cfg, "idle_s": idle})
    raw = job_json(kind, name, cfg, job_id, bool(body.files))
    job, _, archive, digest = await anyio.to_thread.run_sync(pai_svc.prepare, raw, list(body.files or []), True)
    pai_svc.check_pool(rt, job)
    if body.preview:
        return _preview(kind), redact_config(effective)
    row = PaiJob(kind=kind, description=cfg["description"], idle_timeout_s=idle,
                 name=name, owner_id=user.id, state=J.WAITING, spec=raw, code=archive, code_hash=digest,
                 resource_pool=cfg["pool"], job_id=job_id, priority=None, queue_position=time.time(), attempt=1,
                 exit_reason="", created_at=utcnow(), ssh_key=rendezvous.new_ssh_key(),
                 ssh_host_key=rendezvous.new_ssh_key(), config=effective)
    async with rt.orchestrator.transaction() as session:
        session.add(row)
        await session.flush()
        record_initial(session, row, f"{kind} launched")
        pai_jobs.queue_attempt(session, row, "launched")
    rt.orchestrator.wake()
    return await get(rt, user, kind, job_id), redact_config(effective)


def _preview(kind: str) -> dict[str, Any]:
    """What Determined answers for a preview: its empty task (every required field at its zero)."""
    return {"id": "", "description": "", "state": "STATE_UNSPECIFIED", "username": "", "resourcePool": "",
            "jobId": "", "workspaceId": 0, "startTime": iso(utcnow())}


def config_of(job: PaiJob) -> dict[str, Any]:
    """The config an answer shows (secrets redacted); rebuilt from the job JSON for a row launched
    before configs were kept."""
    if job.config is not None:
        return redact_config(job.config)
    role = (job.spec.get("taskRoles") or [{}])[0]
    rebuilt: dict[str, Any] = {
        "description": job.description,
        "resources": {"slots": role.get("gpuNumber", 0), "resource_pool": job.resource_pool},
        "environment": {"image": job.spec.get("image") or "default",
                        "environment_variables": [f"{k}={v}" for k, v in (job.spec.get("jobEnvs") or {}).items()
                                                  if k not in (TENSORBOARD_ENV, TENSORBOARD_TRIALS_ENV)]},
    }
    if job.kind == "command":
        rebuilt["entrypoint"] = role.get("command", "")
    return redact_config(rebuilt)


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
        "startTime": iso(job.created_at), "taskId": alloc.task_id if alloc is not None else job.job_id,
        "allocationId": alloc.id if alloc is not None else "",
        "exitCode": alloc.exit_code if alloc is not None and alloc.state == A.TERMINATED else None,
    }
    entry = gang.first_rank(alloc)
    if job.kind == "notebook":
        out["serviceAddress"] = f"/proxy/{job.job_id}/{NOTEBOOK_PATH}"
    if job.kind == "tensorboard":
        out["serviceAddress"] = f"/proxy/{job.job_id}/"
        out["experimentIds"] = _ids(job, TENSORBOARD_ENV)
        out["trialIds"] = _ids(job, TENSORBOARD_TRIALS_ENV)
    if job.kind == "shell":
        spec = pai_jobs.parsed(job)
        ports = pai_svc.ports_by_label(spec.task_roles[0], entry.ports.pai if entry else [])
        out["addresses"] = ([{"hostIp": entry.address if entry else None,
                              "hostPort": int(ports["ssh"].split(",")[0])}] if ports.get("ssh") else [])
        out["hostPublicKey"] = rendezvous.public_key_line(job.ssh_host_key)
        out["agentUserGroup"] = {"id": 0, "user_id": job.owner_id, "user": SHELL_USER, "uid": TASK_UID,
                                 "group": SHELL_USER, "gid": TASK_UID}
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


async def get_with_config(rt: MasterRuntime, principal: Principal, kind: str, job_id: str
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    job, username, alloc = await _load(rt, kind, job_id)
    return _answer(job, username, alloc, principal), config_of(job)


async def list_kind(rt: MasterRuntime, principal: Principal, kind: str, offset: int, limit: int,
                    users: Sequence[str] = (), user_ids: Sequence[int] = ()) -> dict[str, Any]:
    """A page of one kind, newest first; ``users``/``user_ids``: only theirs (Determined's filters)."""
    where = [PaiJob.kind == kind]
    if users or user_ids:
        where.append(or_(User.username.in_(list(users)), PaiJob.owner_id.in_(list(user_ids))))
    async with rt.sessions() as session:
        total = int(await session.scalar(select(func.count()).select_from(PaiJob)
                                         .join(User, User.id == PaiJob.owner_id).where(*where)) or 0)
        rows = (await session.execute(select(PaiJob, User.username).join(User, User.id == PaiJob.owner_id)
                                      .where(*where).order_by(PaiJob.id.desc())
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


async def _running_ports(session: AsyncSession, job: PaiJob | None) -> tuple[str, dict[str, str]] | None:
    """A placed, open job's task address and its ports by label; None when it is not running."""
    if job is None or J.PAI_JOB.is_terminal(job.state):
        return None
    allocs = await pai_jobs.attempt_allocations(session, job)
    if not allocs or allocs[0].state not in (A.ASSIGNED, A.RUNNING):
        return None
    entry = gang.resources_of(allocs[0])[0]
    return entry.address or "127.0.0.1", pai_svc.ports_by_label(pai_jobs.parsed(job).task_roles[0], entry.ports.pai)


async def notebook_target(session: AsyncSession, task_id: str) -> task_proxy.ProxyTarget | None:
    """A running notebook's JupyterLab or TensorBoard, which serves under ``/proxy/<id>/`` itself."""
    job = await session.scalar(select(PaiJob).where(PaiJob.job_id == task_id, PaiJob.kind.in_(SERVED)))
    running = await _running_ports(session, job)
    if running is None or not running[1].get("http"):
        return None
    assert job is not None
    address, ports = running
    return task_proxy.ProxyTarget(owner_id=job.owner_id, host=address, port=int(ports["http"].split(",")[0]),
                                  base_path=f"/proxy/{task_id}",
                                  headers=task_proxy.secret_headers(task_proxy.task_secret(job.ssh_host_key,
                                                                                           job.job_id)))


async def shell_target(rt: MasterRuntime, shell_id: str) -> tuple[str, int] | None:
    """A running shell's SSH server: its address and port (None when it is not placed or has ended)."""
    async with rt.sessions() as session:
        job = await session.scalar(select(PaiJob).where(PaiJob.job_id == shell_id, PaiJob.kind == "shell"))
        running = await _running_ports(session, job)
    ssh = running[1].get("ssh") if running is not None else None
    return (running[0], int(ssh.split(",")[0])) if running is not None and ssh else None


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
        ids, trial_ids = _ids(job, TENSORBOARD_ENV), _ids(job, TENSORBOARD_TRIALS_ENV)
        shown = Metric.trial_id.in_(trial_ids) if trial_ids else Trial.experiment_id.in_(ids)
        rows = (await session.execute(
            select(Metric.id, Trial.experiment_id, Metric.trial_id, Metric.group, Metric.steps_completed,
                   Metric.metrics).join(Trial, Trial.id == Metric.trial_id)
            .where(shown, Metric.id > after).order_by(Metric.id).limit(limit))).all()
    out = [Scalar(id=row_id, experiment_id=exp_id, trial_id=trial_id, group=group, steps_completed=steps,
                  metrics={k: float(v) for k, v in (values or {}).items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)})
           for row_id, exp_id, trial_id, group, steps, values in rows]
    return Scalars(scalars=out, next_after=out[-1].id if out else after)
