"""Allocation endpoints the task calls: preemption long-poll and ack, rendezvous, accelerators."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from litestar import Request, get, post
from sqlalchemy import select

from controlplane.master.api.auth_guard import require_allocation, runtime_of, user_or_task
from controlplane.master.db.models import Allocation
from controlplane.master.errors import NotFound
from controlplane.state import allocation as A

MAX_POLL_S = 60.0


async def _preempt_state(rt, alloc_id: str) -> tuple[bool, bool]:  # noqa: ANN001
    """(preempt?, allocation still live?)"""
    async with rt.sessions() as session:
        row = (await session.execute(select(Allocation.preempt_requested, Allocation.state)
                                     .where(Allocation.id == alloc_id))).first()
    if row is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return bool(row[0]), row[1] != A.TERMINATED


@get("/api/v1/allocations/{alloc_id:str}/signals/preemption", operation_id="AllocationPreemptionSignal", opt=opt(Action.TASK_READ, ("allocation", "alloc_id")),
     tags=["allocations"])
async def preemption_signal(request: Request, alloc_id: str) -> dict:
    principal = await user_or_task(request)
    require_allocation(principal, alloc_id)
    rt = runtime_of(request)
    raw = request.query_params.get("timeout_seconds") or request.query_params.get("timeoutSeconds") or "0"
    try:
        timeout = min(max(float(raw), 0.0), MAX_POLL_S)
    except ValueError:
        timeout = 0.0
    preempt, live = await _preempt_state(rt, alloc_id)
    if preempt or not live or timeout <= 0:
        return {"preempt": preempt}
    await rt.notifier.wait(("preempt", alloc_id), timeout)
    preempt, _ = await _preempt_state(rt, alloc_id)
    return {"preempt": preempt}


@post("/api/v1/allocations/{alloc_id:str}/signals/ack_preemption", operation_id="AckAllocationPreemptionSignal", opt=opt(Action.TASK_REPORT, ("allocation", "alloc_id")),
      tags=["allocations"], status_code=200)
async def ack_preemption(request: Request, alloc_id: str) -> dict:
    principal = await user_or_task(request)
    require_allocation(principal, alloc_id)
    async with runtime_of(request).sessions.begin() as session:
        alloc = await session.get(Allocation, alloc_id)
        if alloc is None:
            raise NotFound(f"allocation {alloc_id} not found")
        alloc.preempt_acked = True
    return {}


@post("/api/v1/allocations/{alloc_id:str}/acceleratorData", operation_id="PostAllocationAcceleratorData", opt=opt(Action.TASK_REPORT, ("allocation", "alloc_id")),
      tags=["allocations"], status_code=200)
async def accelerator_data(request: Request, alloc_id: str) -> dict:
    principal = await user_or_task(request)
    require_allocation(principal, alloc_id)
    return {}


@get("/api/v1/allocations/{alloc_id:str}/resources/{resources_id:str}/rendezvous",
     operation_id="AllocationRendezvousInfo", opt=opt(Action.TASK_READ, ("allocation", "alloc_id")),
     tags=["allocations"])
async def rendezvous(request: Request, alloc_id: str, resources_id: str) -> dict:
    principal = await user_or_task(request)
    require_allocation(principal, alloc_id)
    async with runtime_of(request).sessions() as session:
        alloc = await session.get(Allocation, alloc_id)
    if alloc is None:
        raise NotFound(f"allocation {alloc_id} not found")
    return {"rendezvousInfo": {"addresses": ["127.0.0.1"], "rank": 0, "slots": [len(alloc.slot_ids or [])]}}


ROUTES = [preemption_signal, ack_preemption, accelerator_data, rendezvous]
