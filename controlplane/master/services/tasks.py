"""Tasks as the task API reads them: a task's code (its experiment's model definition, or its
job's codeDir) with the owner who may read it, and the live allocations ``det slot list`` shows."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from controlplane.master.db.models import Allocation, Experiment, PaiJob, Trial
from controlplane.master.errors import NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.state import allocation as A


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
            select(Experiment.model_definition, Experiment.owner_id).join(Trial, Trial.experiment_id == Experiment.id)
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
