"""OpenPAI jobs inside the orchestrator: each attempt's tasks are allocations placed together as
one task group, started with the ``PAI_*`` environment, and ended by the frameworklauncher's
completion policy (``controlplane.pai.completion``), retried whole while ``retryCount`` allows.

Everything here runs inside an orchestrator transaction; messages to agents go through the
orchestrator's after-commit queue. A task's allocation id is ``<task id>.<attempt>``, its task id
``pai-<job>-<role>-<index>`` (a command's, shell's, notebook's or TensorBoard's one task: the
command's own id, as Determined's), so ``run_id_of`` gives the attempt and a token of an earlier
attempt is refused once the job has moved on (its allocations are TERMINATED before the next
attempt is queued).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.bounded_cache import BoundedCache
from controlplane.common.timeutil import aware, utcnow
from controlplane.master import proxy_sessions as task_proxy
from controlplane.master.db.models import Allocation, PaiJob, User
from controlplane.master.orchestration import gang, lifecycle, rendezvous, spread_network
from controlplane.master.orchestration.live_index import LiveIndex
from controlplane.master.orchestration.transitions import move, record_initial
from controlplane.master.runtime_core import RuntimeCore
from controlplane.master.token_cache import token_hash
from controlplane.pai import completion, env, outputs, ports
from controlplane.pai import spec as pai_spec
from controlplane.scheduler.environment import Image
from controlplane.scheduler.model import DEFAULT_PRIORITY
from controlplane.state import allocation as A
from controlplane.state import pai_job as J
from controlplane.wire import agent_protocol as wire

log = logging.getLogger("controlplane.orchestrator.pai")


class Orchestrator(Protocol):
    """What a job's placement needs of the orchestrator whose transaction it runs in."""

    rt: RuntimeCore
    live: LiveIndex  # a placed task is added to it

    def send_after_commit(self, agent_id: str, msg: wire.MasterMessage) -> None: ...

    def kill_allocation(self, alloc: Allocation, reason: str) -> None: ...

GROUP_PREFIX = "pai-job:"
# Serves the job's SSH and names its tasks for OpenSSH's client, then runs the command with bash.
WRAPPER = ("python3", "-m", "controlplane.exec.pai_task", "--")
MEMORY_LIMIT_ENV = "DET_TASK_MEMORY_LIMIT_MB"  # read by the wrapper: RLIMIT_DATA of the command
TASK_TYPE = "PAI"

# By the job's queue id (a UUID, so two databases in one process never share one): a job's JSON
# never changes, and the scheduler asks for it every tick.
_parsed: BoundedCache[str, pai_spec.PaiJob] = BoundedCache(1000)


def parsed(job: PaiJob) -> pai_spec.PaiJob:
    """The stored job JSON as the protocol's dataclass (it was validated at submit)."""
    key = job.job_id
    hit = _parsed.get(key)
    if hit is None:
        hit = _parsed.put(key, pai_spec.parse_job(job.spec)[0])
    return hit


def task_id(job_id: int, role: str, index: int) -> str:
    return f"pai-{job_id}-{role}-{index}"


def task_id_of(job: PaiJob, role: str, index: int) -> str:
    """The task id of one task of the job: an OpenPAI job's ``task_id``; a command's (shell's,
    notebook's, TensorBoard's) one task is the command itself, as in Determined."""
    return task_id(job.id, role, index) if job.kind == "pai" else job.job_id


def group_id(job: PaiJob) -> str:
    """The scheduler's name for one attempt's task group."""
    return f"{GROUP_PREFIX}{job.id}.{job.attempt}"


def image_of(job: PaiJob) -> Image:
    """The environment its tasks run in, and the GPU model they need (``gpuType``)."""
    name = str(job.spec.get("image") or "default")
    gpu_type = job.spec.get("gpuType")
    return Image(name, name, name, gpu_type=str(gpu_type) if gpu_type else None)


def task_order(job: pai_spec.PaiJob) -> list[tuple[str, int, int]]:
    """(role, index, slots) of every task: roles in declared order, then task index."""
    return [(r.name, i, r.gpu_number) for r in job.task_roles for i in range(r.task_number)]


def task_cpus(job: PaiJob, role: str) -> int:
    """The CPUs one task of the role books on its agent: its ``cpuNumber`` (an OpenPAI job's only; a
    command, shell, notebook or TensorBoard declares none)."""
    if job.kind != "pai":
        return 0
    try:
        return parsed(job).role(role).cpu_number
    except KeyError:
        return 0


def task_needs(job: PaiJob, role: str) -> tuple[int, frozenset[int]]:
    """What one task of the role needs besides slots: its CPUs and its fixed ports (``beginAt`` ranges)."""
    spec = parsed(job).role(role)
    return task_cpus(job, role), frozenset(n for p in spec.ports if p.begin_at
                                           for n in range(p.begin_at, p.begin_at + p.port_number))


def queue_attempt(session: AsyncSession, job: PaiJob, reason: str) -> None:
    """One PENDING allocation per task of the job's current attempt."""
    now = utcnow()
    for role, index, slots in task_order(parsed(job)):
        tid = task_id_of(job, role, index)
        alloc = Allocation(
            id=f"{tid}.{job.attempt}", task_id=tid, trial_id=None, state=A.PENDING,
            resource_pool=job.resource_pool, slots_needed=slots, priority=job.priority or DEFAULT_PRIORITY,
            token_hash=token_hash(secrets.token_urlsafe(32)),  # placeholder until placement mints the token
            created_at=now, pai_job_id=job.id, task_role=role, task_index=index,
        )
        session.add(alloc)
        record_initial(session, alloc, reason)


async def attempt_allocations(session: AsyncSession, job: PaiJob) -> list[Allocation]:
    rows = (await session.scalars(select(Allocation).where(
        Allocation.pai_job_id == job.id, Allocation.id.endswith(f".{job.attempt}", autoescape=True)))).all()
    return sorted((a for a in rows if attempt_of(a) == job.attempt),
                  key=lambda a: (a.task_role or "", a.task_index or 0))


def attempt_of(alloc: Allocation) -> int:
    """The attempt an allocation belongs to (its id ends in ``.<attempt>``)."""
    tail = alloc.id.rpartition(".")[2]
    return int(tail) if tail.isdigit() else 0


def _host_ports(job_key: str, address: str, used: dict[str, set[int]]) -> ports.AgentPorts:
    # The scan starts where the job's id hashes to: another master's agents on the same host (which
    # this master cannot see) then rarely hold the ports this one hands out (rendezvous does the same).
    return ports.AgentPorts(rendezvous.PORT_LOW, rendezvous.PORT_HIGH - 1, frozenset(used.get(address, ())),
                            start=rendezvous.hashed_start(job_key))


async def place(orch: Orchestrator, session: AsyncSession, job: PaiJob, rows: Sequence[Allocation],
                resources: Sequence[tuple[str, tuple[int, ...]]], addresses: dict[str, str],
                used: dict[str, set[int]], endpoints: Mapping[str, tuple[str, int]]) -> str | None:
    """Starts every task of the attempt where the planner put it (``resources``: one entry per
    task, in ``task_order``). When the tasks' ports cannot be booked, nothing changes and the answer
    is why (the job waits; the orchestrator shows and logs the reason): None when it started."""
    spec = parsed(job)
    order = task_order(spec)
    by_key = {(a.task_role, a.task_index): a for a in rows}
    where = {(role, index): addresses.get(agent, rendezvous.DEFAULT_ADDRESS)
             for (role, index, _), (agent, _) in zip(order, resources, strict=True)}
    try:
        # the queue's job id is a UUID: a row id would be 1 for every master's first job
        agents = {addr: _host_ports(job.job_id, addr, used) for addr in set(where.values())}
        booked = ports.assign_ports(spec, where, agents)
    except ports.PortError as e:
        return f"waiting for ports: task {e}"
    # Spread over agents that all make task networks, the tasks reach each other in one of their own
    # (spread_network.py); their ports stay booked on their hosts, where the proxy and SSH reach them.
    agent_of = {(role, index): agent for (role, index, _), (agent, _) in zip(order, resources, strict=True)}
    spread = spread_network.plan([agent for agent, _ in resources], endpoints)
    seen_at = {key: spread.address_of(agent_of[key]) if spread is not None else where[key] for key in where}
    placements = {key: env.TaskPlacement(seen_at[key], booked[key]) for key in where}
    owner = await session.scalar(select(User.username).where(User.id == job.owner_id)) or "determined"
    # Where its tasks' $PAI_OUTPUT_DIR is kept (the agent keeps it at each task's end): PAI_DEFAULT_FS_URI
    fs_uri = outputs.location_uri(orch.rt.settings.default_checkpoint_storage(), job.job_id) \
        if job.kind == "pai" else ""
    now = utcnow()
    # The job's tasks share a network of their own when they all run on one agent or in a spread one.
    network = f"{job.job_id}.{job.attempt}" if len({agent for agent, _ in resources}) == 1 or spread else ""
    for (role, index, _), (agent_id, slots) in zip(order, resources, strict=True):
        alloc = by_key[(role, index)]
        address = where[(role, index)]
        task_ports = [p for group in booked[(role, index)].values() for p in group]
        used.setdefault(address, set()).update(task_ports)
        gang.assign(alloc, ((agent_id, tuple(slots)),))
        gang.set_resources(alloc, [msgspec.structs.replace(
            gang.resources_of(alloc)[0], address=address, ports=gang.RankPorts(pai=task_ports),
            network_address=seen_at[(role, index)] if spread is not None else None)])
        orch.live.placed(alloc)
        alloc.assigned_at = now
        token = lifecycle.mint_token(alloc)
        move(session, alloc, A.ASSIGNED, f"placed on {agent_id} slots {list(slots)} with job {job.name}'s tasks")
        task_env = env.build_env(spec, placements, role, index, user_name=owner, default_fs_uri=fs_uri)
        task_env.update({
            "DET_CLUSTER_ID": orch.rt.cluster_id, "DET_TASK_ID": alloc.task_id, "DET_ALLOCATION_ID": alloc.id,
            "DET_SESSION_TOKEN": token, "DET_RESOURCES_ID": alloc.id, "DET_USER": owner, "DET_TASK_TYPE": TASK_TYPE,
            "PAI_JOB_ATTEMPT_ID": str(job.attempt - 1),
        })
        if job.kind in SERVED_KINDS:  # what its web server requires of every request: only the proxy sends it
            task_env[task_proxy.SECRET_ENV] = task_proxy.task_secret(job.ssh_host_key, job.job_id)
        if job.kind == "pai":  # a role's memoryMB is its tasks' limit (commands and shells have none)
            task_env[MEMORY_LIMIT_ENV] = str(spec.role(role).memory_mb)
        command = spec.role(role).command
        orch.send_after_commit(agent_id, wire.StartTask(
            allocation_id=alloc.id, task_id=alloc.task_id, task_type=TASK_TYPE, entrypoint=[*WRAPPER, command],
            ssh_key=job.ssh_key, ssh_host_key=job.ssh_host_key,
            read_only_paths=[pai_spec.code_dir_name(spec.code_dir)] if spec.code_dir and job.kind == "pai" else [],
            env=task_env, slot_ids=list(slots), session_token=token, context_hash=job.code_hash,
            kill_grace_seconds=orch.rt.settings.kill_grace_s, container_addrs=[seen_at[(role, index)]],
            container_slot_counts=[len(slots)], environment=image_of(job).cpu,
            network=network, served_ports=task_ports,
            overlay=spread.for_agent(agent_id) if spread is not None else None,
            collect_outputs=job.kind == "pai"))
    if job.state == J.WAITING:
        move(session, job, J.RUNNING, f"attempt {job.attempt}: every task placed")
        job.launched_at = job.launched_at or now
    return None


def _task_state(alloc: Allocation) -> completion.TaskState:
    if alloc.state == A.PENDING:
        return completion.TaskState.PENDING
    if alloc.state != A.TERMINATED:
        return completion.TaskState.RUNNING
    return completion.TaskState.SUCCEEDED if alloc.exit_code == 0 else completion.TaskState.FAILED


async def task_ended(orch: Orchestrator, session: AsyncSession, alloc: Allocation) -> None:
    """One task's allocation has ended (already TERMINATED): apply the completion policy."""
    job = await session.get(PaiJob, alloc.pai_job_id)
    if job is None or J.PAI_JOB.is_terminal(job.state) or attempt_of(alloc) != job.attempt:
        return  # a task stopped by an earlier decision, or of an earlier attempt
    spec = parsed(job)
    rows = await attempt_allocations(session, job)
    states: dict[str, list[completion.TaskState]] = {r.name: [] for r in spec.task_roles}
    for row in rows:
        states[row.task_role or ""].append(_task_state(row))
    decision = completion.decide(spec, states)
    if decision.state is completion.JobState.RUNNING:
        return
    _stop_live(orch, session, rows, f"job {job.name}: {decision.reason}")
    if decision.state is completion.JobState.SUCCEEDED:
        _finish(session, job, J.SUCCEEDED, decision.reason)
    elif completion.should_retry(spec, decision.state, job.attempt - 1):
        job.attempt += 1
        job.exit_reason = decision.reason
        if job.state == J.RUNNING:
            move(session, job, J.WAITING, f"attempt {job.attempt - 1} failed ({decision.reason}); "
                                          f"retry {job.attempt - 1} of {spec.retry_count}")
        queue_attempt(session, job, f"attempt {job.attempt} (retry {job.attempt - 1} of {spec.retry_count})")
    else:
        _finish(session, job, J.FAILED, decision.reason)


def _stop_live(orch: Orchestrator, session: AsyncSession, rows: Sequence[Allocation], reason: str) -> None:
    """Stops the attempt's tasks that have not ended; each is marked stopped (not failed) for its status."""
    for row in rows:
        if row.state == A.TERMINATED:
            continue
        if row.state == A.PENDING:
            lifecycle.end_allocation(session, orch.rt.tokens, row, reason)
        else:
            gang.set_resources(row, [msgspec.structs.replace(r, stopped=True) for r in gang.resources_of(row)])
            orch.kill_allocation(row, reason)


def was_stopped(alloc: Allocation) -> bool:
    """An ended task that was stopped (never placed, or killed by a decision), not one that failed."""
    return alloc.assigned_at is None or any(r.stopped for r in gang.resources_of(alloc))


def _finish(session: AsyncSession, job: PaiJob, state: str, reason: str) -> None:
    move(session, job, state, reason)
    job.exit_reason = reason
    job.completed_at = utcnow()


async def stop(orch: Orchestrator, session: AsyncSession, job: PaiJob, who: str, why: str = "") -> None:
    """A user's STOP (or the idle timeout's): every task of the attempt is stopped, the job is STOPPED."""
    if J.PAI_JOB.is_terminal(job.state):
        return
    reason = why or f"stopped by {who}"
    _stop_live(orch, session, await attempt_allocations(session, job), f"job {job.name}: {reason}")
    _finish(session, job, J.STOPPED, reason)


IDLE_CHECK_S = 5.0
SERVED_KINDS = ("notebook", "tensorboard")  # reached through the master's proxy: stopped when idle
_idle_checked = {"at": 0.0}


async def reap_idle(orch: Orchestrator, session: AsyncSession) -> None:
    """Stops notebooks and TensorBoards nobody used through the master's proxy for their ``idle_timeout``
    (never used: counted from their launch). Looked at every few seconds, not every tick."""
    now = time.monotonic()
    if now - _idle_checked["at"] < IDLE_CHECK_S:
        return
    _idle_checked["at"] = now
    rows = (await session.scalars(select(PaiJob).where(
        PaiJob.kind.in_(SERVED_KINDS), PaiJob.state == J.RUNNING, PaiJob.idle_timeout_s.is_not(None)))).all()
    for job in rows:
        idle = orch.rt.proxy.idle_for(job.job_id)
        if idle is None:
            launched = aware(job.launched_at)
            idle = (utcnow() - launched).total_seconds() if launched is not None else 0.0
        if job.idle_timeout_s is not None and idle > job.idle_timeout_s:
            log.info("%s %s idle for %.0fs: stopping it", job.kind, job.job_id, idle)
            await stop(orch, session, job, "the idle timeout",
                       f"idle for {idle:.0f}s (idle_timeout {job.idle_timeout_s}s)")
            orch.rt.proxy.forget(job.job_id)
