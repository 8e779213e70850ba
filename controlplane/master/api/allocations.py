"""Allocation endpoints the task calls: preemption long-poll and ack, rendezvous, accelerators.

A task token reaches only its own allocation (the route guard's ``task_scope``); a user reaches
an allocation of work they own for the writes (an admin any), and may read any.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, post
from litestar.params import Parameter, QueryParameter

from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.errors import Conflict, NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import gang
from controlplane.master.orchestration import rendezvous as rendezvous_info
from controlplane.master.principals import Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import allocations as svc

MAX_POLL_S = 60.0
NO_NUL = r"^[^\x00]*$"
AllocId = Annotated[str, Parameter(max_length=160, pattern=NO_NUL, description="the allocation's id")]
Seconds = Annotated[float | None,
                    Parameter(ge=0, le=2**31 - 1, description=f"long-poll up to this (max {MAX_POLL_S:g})")]
Text = Annotated[str, msgspec.Meta(max_length=255, pattern=NO_NUL)]


class AcceleratorData(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1AcceleratorData (stored nowhere yet: accepted so the harness need not fail)."""

    container_id: Text | None = None
    allocation_id: Text | None = None
    node_name: Text | None = None
    task_id: Text | None = None
    accelerator_type: Text | None = None
    accelerator_uuids: Annotated[list[Text], msgspec.Meta(max_length=1024)] | None = None


class AcceleratorDataRequest(msgspec.Struct, rename="camel", kw_only=True):
    allocation_id: Text | None = None
    accelerator_data: AcceleratorData | None = None


class AckPreemptionRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's AckAllocationPreemptionSignal body (the path names the allocation)."""

    allocation_id: Text | None = None


class PreemptionResponse(msgspec.Struct, rename="camel", kw_only=True):
    preempt: bool


class V1RendezvousInfo(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1RendezvousInfo, plus the ports the master chose for the allocation."""

    addresses: list[str]  # each container's, by rank
    rank: int
    slots: list[int]  # each container's slot count, by rank
    chief_port: int
    dist_ports: list[int]
    ssh_ports: list[int]


class RendezvousResponse(msgspec.Struct, rename="camel", kw_only=True):
    rendezvous_info: V1RendezvousInfo


async def _check_owner(rt: MasterRuntime, principal: Principal, alloc_id: str) -> None:
    require_owner(principal, Action.TASK_REPORT, await svc.owner_of(rt, alloc_id), f"allocation {alloc_id}")


@get("/api/v1/allocations/{alloc_id:str}/signals/preemption", operation_id="AllocationPreemptionSignal",
     opt=opt(Action.TASK_READ, ("allocation", "alloc_id")), tags=["allocations"])
async def preemption_signal(request: AnyRequest, alloc_id: AllocId,
                            timeout_seconds: Seconds = None,
                            timeout_seconds_camel: Annotated[float | None, QueryParameter(
                                name="timeoutSeconds", ge=0, le=2**31 - 1)] = None) -> PreemptionResponse:
    rt = runtime_of(request)
    raw = timeout_seconds if timeout_seconds is not None else timeout_seconds_camel
    timeout = min(raw or 0.0, MAX_POLL_S)
    preempt, live, watching = await svc.preempt_state(rt, alloc_id)
    principal = principal_of(request)
    if live and not watching and isinstance(principal, TaskPrincipal) and principal.allocation_id == alloc_id:
        await svc.note_watching(rt, alloc_id)  # it honours preemption: consolidation may move it
    if preempt or not live or timeout <= 0:
        return PreemptionResponse(preempt=preempt)
    await rt.notifier.wait(("preempt", alloc_id), timeout)
    preempt, _, _ = await svc.preempt_state(rt, alloc_id)
    return PreemptionResponse(preempt=preempt)


@post("/api/v1/allocations/{alloc_id:str}/signals/ack_preemption", operation_id="AckAllocationPreemptionSignal",
      opt=opt(Action.TASK_REPORT, ("allocation", "alloc_id")), tags=["allocations"], status_code=200)
async def ack_preemption(request: AnyRequest, alloc_id: AllocId,
                         data: AckPreemptionRequest | None = None) -> EmptyResponse:
    """Acknowledged while the allocation lives (an ack for an ended one is a 409)."""
    rt = runtime_of(request)
    await _check_owner(rt, principal_of(request), alloc_id)
    await svc.ack_preemption(rt, alloc_id)
    return EmptyResponse()


@post("/api/v1/allocations/{alloc_id:str}/acceleratorData", operation_id="PostAllocationAcceleratorData",
      opt=opt(Action.TASK_REPORT, ("allocation", "alloc_id")), tags=["allocations"], status_code=200)
async def accelerator_data(request: AnyRequest, alloc_id: AllocId,
                           data: AcceleratorDataRequest | None = None) -> EmptyResponse:
    await _check_owner(runtime_of(request), principal_of(request), alloc_id)
    return EmptyResponse()


@get("/api/v1/allocations/{alloc_id:str}/resources/{resources_id:str}/rendezvous",
     operation_id="AllocationRendezvousInfo", opt=opt(Action.TASK_READ, ("allocation", "alloc_id")),
     tags=["allocations"])
async def rendezvous(request: AnyRequest, alloc_id: AllocId,
                     resources_id: Annotated[str, Parameter(max_length=255, pattern=NO_NUL)]) -> RendezvousResponse:
    """Determined's v1RendezvousInfo for one container of the gang (``resources_id`` is its
    DET_RESOURCES_ID, or its rank): every container's address and slot count and its own rank,
    plus the ports the master chose for the allocation (``chiefPort``, ``distPorts``, ``sshPorts``).
    Everything is decided at placement, so the answer needs no wait for the other containers."""
    alloc = await svc.get(runtime_of(request), alloc_id)
    if not gang.resources_of(alloc):
        raise Conflict(f"allocation {alloc_id} is not placed yet (state {alloc.state})")
    rank = rendezvous_info.rank_of(alloc, resources_id)
    if rank is None:
        raise NotFound(f"allocation {alloc_id} has no resources {resources_id!r}")
    info = rendezvous_info.info(alloc)
    return RendezvousResponse(rendezvous_info=V1RendezvousInfo(
        addresses=info["container_addrs"], rank=rank, slots=info["container_slot_counts"],
        chief_port=info["chief_port"], dist_ports=info["dist_ports"], ssh_ports=info["ssh_ports"]))


ROUTES = [preemption_signal, ack_preemption, accelerator_data, rendezvous]
