"""Agents: the WebSocket they connect to, and (admins, viewers for the list) the agents API.

`GET /api/v1/agents` lists agents that are connected or still within their reconnect window
(`agent_reconnect_wait`), with `connected: false` for the latter; an agent lost past its window
is listed only with `all=true`. The list is paged (offset/limit, Determined's pagination).
`POST /api/v1/agents/{id}/enable|disable` take an optional `{"drain": bool}` body.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from functools import partial
from typing import Annotated

import msgspec
from litestar import get, post, websocket
from litestar.exceptions import WebSocketDisconnect
from litestar.params import Parameter, QueryParameter

from controlplane.common.timeutil import iso, utcnow
from controlplane.master.agent_hub import AgentConnection
from controlplane.master.agent_inbox import AgentInbox, RecordDisconnect, RecordRegistration
from controlplane.master.api.auth_guard import bearer_token, runtime_of, user_of
from controlplane.master.api.paging_params import Limit, Offset
from controlplane.master.authz import Action, opt
from controlplane.master.db import outage
from controlplane.master.db.models import Agent
from controlplane.master.http_types import AnyRequest, AnyWebSocket
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import agents as agents_svc
from controlplane.master.services import logs as log_service
from controlplane.master.services.paging import Pagination, page_size, pagination
from controlplane.wire import agent_protocol as wire

log = logging.getLogger("controlplane.master.agents")

CLOSE_BAD_TOKEN = 4401
CLOSE_BAD_MESSAGE = 4400
MAX_CPUS = 1 << 20  # a larger Register.cpus is taken as this many


async def _writer(socket: AnyWebSocket, conn: AgentConnection) -> None:
    while True:
        msg = await conn.outbox.get()
        if msg is None:  # replaced by a newer connection of the same agent
            await socket.close(code=1000, reason="replaced by a newer connection")
            return
        await socket.send_text(wire.encode(msg).decode())


@websocket("/agents/ws", name="agent-socket", opt=opt(Action.AGENT))
async def agent_socket(socket: AnyWebSocket) -> None:
    rt = socket.app.state.runtime
    token = bearer_token(socket.headers.get("authorization")) or ""
    await socket.accept()
    if not rt.settings.join_token or not hmac.compare_digest(token.encode(), rt.settings.join_token.encode()):
        log.warning("refused an agent connection from %s: bad join token", socket.client.host if socket.client else "?")
        await socket.close(code=CLOSE_BAD_TOKEN, reason="invalid join token")
        return
    try:
        first = wire.decode_from_agent(await socket.receive_text())
    except (msgspec.DecodeError, WebSocketDisconnect) as e:
        await _close_quietly(socket, CLOSE_BAD_MESSAGE, f"expected a register message: {e}")
        return
    if not isinstance(first, wire.Register):
        await _close_quietly(socket, CLOSE_BAD_MESSAGE, "the first message must be register")
        return
    pools = set(rt.settings.pool_names())
    if first.pool not in pools:
        await _close_quietly(socket, CLOSE_BAD_MESSAGE, f"unknown resource pool {first.pool!r}")
        return
    conn = AgentConnection(agent_id=first.agent_id, pool=first.pool, slots=list(first.slots),
                           running_at_register=frozenset(first.running),
                           address=(first.addresses or ["127.0.0.1"])[0], overlay_port=first.overlay_port,
                           environments=tuple(dict.fromkeys(first.environments)),
                           instance_type=first.instance_type[:255], cpus=min(max(0, first.cpus), MAX_CPUS))
    inbox = rt.hub.inboxes.get(conn.agent_id)
    if inbox is None:
        inbox = rt.hub.inboxes[conn.agent_id] = AgentInbox(conn.agent_id, partial(_apply, rt, conn.agent_id),
                                                         rt.db_health)
    try:
        if len(inbox):  # what an earlier connection delivered is applied first
            raise _Deferred()
        registered = await rt.orchestrator.agent_registered(conn, first)
    except Exception as exc:
        cause = outage.cause_of(exc)
        if cause is None and not isinstance(exc, _Deferred):
            raise
        # The database is unavailable (or busy with this agent's backlog): the agent is answered from
        # memory (its window, no kills) and keeps its tasks; the registration is recorded, and stale
        # tasks killed, once the database is back.
        if cause is not None:
            rt.db_health.failed(cause)
        registered = rt.orchestrator.agent_attached(conn, first)
        inbox.put(RecordRegistration(conn, first))
    await socket.send_text(wire.encode(registered).decode())
    writer = asyncio.create_task(_writer(socket, conn))
    try:
        while True:  # only reads: the inbox applies, so pings are answered while the database is down
            msg = wire.decode_from_agent(await socket.receive_text())
            if isinstance(msg, wire.TaskLogs | wire.TaskStarted | wire.TaskExited | wire.InstanceInterrupted):
                inbox.put(msg)
    except WebSocketDisconnect:
        pass
    except msgspec.DecodeError as e:
        log.warning("agent %s sent a bad message: %s", conn.agent_id, e)
        await _close_quietly(socket, CLOSE_BAD_MESSAGE, "bad message")
    finally:
        writer.cancel()
        if rt.orchestrator.agent_detached(conn):
            inbox.put(RecordDisconnect(conn))


class _Deferred(Exception):
    """This agent's inbox still holds messages: its registration is recorded after them."""


async def _apply(rt: MasterRuntime, agent_id: str, item: object) -> None:
    """One message from an agent's inbox (orchestration/agent_inbox.py)."""
    if isinstance(item, RecordRegistration):
        registered = await rt.orchestrator.agent_registered(item.conn, item.register)
        if registered.kill:
            item.conn.send(registered)  # the agent kills what the master no longer runs
        return
    if isinstance(item, RecordDisconnect):
        await rt.orchestrator.agent_disconnect_recorded(item.conn)
        return
    msg = item
    if isinstance(msg, wire.TaskLogs):
        await log_service.ingest_agent_logs(rt, agent_id, msg)
    elif isinstance(msg, wire.TaskStarted):
        await rt.orchestrator.task_started(agent_id, msg)
    elif isinstance(msg, wire.TaskExited):
        await rt.orchestrator.task_exited(agent_id, msg)
    elif isinstance(msg, wire.InstanceInterrupted):
        await rt.orchestrator.agent_interrupted(agent_id, msg.reason)


async def _close_quietly(socket: AnyWebSocket, code: int, reason: str) -> None:
    try:
        await socket.close(code=code, reason=reason[:120])
    except Exception:  # noqa: BLE001 - already closed by the peer
        pass


class V1Device(msgspec.Struct, rename="camel", kw_only=True):
    id: int
    brand: str
    uuid: str
    type: str  # TYPE_CUDA | TYPE_CPU


class V1Container(msgspec.Struct, rename="camel", kw_only=True):
    id: str  # the allocation using the slot
    state: str
    permission_denied: bool = False


class V1Slot(msgspec.Struct, rename="camel", kw_only=True):
    id: str
    device: V1Device
    enabled: bool
    draining: bool
    container: V1Container | None = None


class V1TypeStats(msgspec.Struct, rename="camel", kw_only=True):
    states: dict[str, int]
    total: int
    disabled: int
    draining: int


class V1SlotStats(msgspec.Struct, rename="camel", kw_only=True):
    type_stats: dict[str, V1TypeStats]
    brand_stats: dict[str, V1TypeStats]


class V1Agent(msgspec.Struct, rename="camel", kw_only=True):
    id: str
    registered_time: str | None
    last_seen: str | None
    connected: bool
    slots: dict[str, V1Slot]
    resource_pools: list[str]
    enabled: bool
    draining: bool
    addresses: list[str]
    version: str
    slot_stats: V1SlotStats
    # Task environments it offers (environment.image names), as it last registered with this
    # master; [] for an agent that has not registered since the master started.
    environments: list[str] = msgspec.field(default_factory=list)
    # The cloud instance type it said it runs on when it last registered ("" unknown; not Determined's).
    instance_type: str = ""


class GetAgentsResponse(msgspec.Struct, rename="camel", kw_only=True):
    agents: list[V1Agent]
    pagination: Pagination


class AgentResponse(msgspec.Struct, rename="camel", kw_only=True):
    agent: V1Agent


class ToggleAgentRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's Enable/DisableAgentRequest: `drain` (disable only) lets running work finish."""

    drain: bool = False
    agent_id: Annotated[str, msgspec.Meta(max_length=255)] | None = None


AgentId = Annotated[str, Parameter(min_length=1, max_length=255, description="the agent's id")]


def agent_json(agent: Agent, slot_use: dict[int, str], connected: bool,
               environments: tuple[str, ...] = (), instance_type: str = "") -> V1Agent:
    slots: dict[str, V1Slot] = {}
    type_stats: dict[str, V1TypeStats] = {}
    for s in agent.slots or []:
        device_type = "TYPE_CUDA" if s.get("type") == "cuda" else "TYPE_CPU"
        alloc = slot_use.get(s["id"])
        off = (agent.disabled_slots or {}).get(str(s["id"]))  # None: enabled; True: draining; False: disabled
        slots[str(s["id"])] = V1Slot(
            id=str(s["id"]),
            device=V1Device(id=s["id"], brand=s.get("brand", ""), uuid=s.get("uuid", ""), type=device_type),
            enabled=agent.enabled and off is None, draining=agent.draining or off is True,
            container=V1Container(id=alloc, state="STATE_RUNNING") if alloc else None)
        stats = type_stats.setdefault(device_type, V1TypeStats(states={}, total=0, disabled=0, draining=0))
        stats.total += 1
        stats.disabled += int(not slots[str(s["id"])].enabled)
        stats.draining += int(slots[str(s["id"])].draining)
        if alloc:
            stats.states["STATE_RUNNING"] = stats.states.get("STATE_RUNNING", 0) + 1
    return V1Agent(
        # A connected agent is seen now (it heartbeats); the stored time is when it was last connected.
        id=agent.id, registered_time=iso(agent.registered_at),
        last_seen=iso(utcnow() if connected else agent.last_seen), connected=connected,
        slots=slots, resource_pools=[agent.resource_pool], enabled=agent.enabled, draining=agent.draining,
        addresses=list(agent.addresses or []), version=agent.version or "",
        slot_stats=V1SlotStats(type_stats=type_stats, brand_stats={}), environments=list(environments),
        instance_type=instance_type)


@get("/api/v1/agents", operation_id="GetAgents", opt=opt(Action.VIEW), tags=["agents"])
async def list_agents(
    request: AnyRequest,
    offset: Offset = 0,
    limit: Limit = 0,
    show_all: Annotated[bool, QueryParameter(name="all", description=(
        "also agents lost past their reconnect window (agent_reconnect_wait)"))] = False,
) -> GetAgentsResponse:
    """Connected agents and those within their reconnect window (`connected: false`), by id."""
    user_of(request)
    rt = runtime_of(request)
    agents, total, use = await agents_svc.page(rt, show_all=show_all, offset=offset, size=page_size(limit))
    return GetAgentsResponse(agents=[agent_json(a, use.get(a.id, {}), a.id in rt.hub.connections,
                                                rt.hub.environments.get(a.id, ()), rt.hub.instance_types.get(a.id, ""))
                                     for a in agents],
                             pagination=pagination(offset, limit, total, len(agents)))


async def _set_enabled(request: AnyRequest, agent_id: str, enable: bool, drain: bool) -> AgentResponse:
    user_of(request)
    rt = runtime_of(request)
    agent, use = await agents_svc.set_enabled(rt, agent_id, enable, drain)
    return AgentResponse(agent=agent_json(agent, use.get(agent.id, {}), agent.id in rt.hub.connections,
                                          rt.hub.environments.get(agent.id, ()),
                                          rt.hub.instance_types.get(agent.id, "")))


@post("/api/v1/agents/{agent_id:str}/enable", operation_id="EnableAgent", tags=["agents"],
      opt=opt(Action.ADMINISTER), status_code=200, name="agent-enable")
async def enable_agent(request: AnyRequest, agent_id: AgentId, data: ToggleAgentRequest | None = None) -> AgentResponse:
    """The agent takes new work again."""
    return await _set_enabled(request, agent_id, True, False)


@post("/api/v1/agents/{agent_id:str}/disable", operation_id="DisableAgent", tags=["agents"],
      opt=opt(Action.ADMINISTER), status_code=200, name="agent-disable")
async def disable_agent(request: AnyRequest, agent_id: AgentId,
                        data: ToggleAgentRequest | None = None) -> AgentResponse:
    """No new work; without drain, running work is preempted (it checkpoints and resumes
    elsewhere); with drain, it finishes here."""
    return await _set_enabled(request, agent_id, False, bool(data and data.drain))


class DisableSlotRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's DisableSlotRequest: ``drain`` lets running work on the slot finish."""

    drain: bool = False
    agent_id: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    slot_id: Annotated[str, msgspec.Meta(max_length=32)] | None = None


class SlotResponse(msgspec.Struct, rename="camel", kw_only=True):
    slot: V1Slot


SlotId = Annotated[int, Parameter(ge=0, le=2**31 - 1, description="the slot's id on its agent")]


async def _set_slot(request: AnyRequest, agent_id: str, slot_id: int, enable: bool, drain: bool) -> SlotResponse:
    user_of(request)
    rt = runtime_of(request)
    agent, use = await agents_svc.set_slot(rt, agent_id, slot_id, enable, drain)
    answer = agent_json(agent, use.get(agent_id, {}), agent_id in rt.hub.connections)
    return SlotResponse(slot=answer.slots[str(slot_id)])


@post("/api/v1/agents/{agent_id:str}/slots/{slot_id:int}/enable", operation_id="EnableSlot", tags=["agents"],
      opt=opt(Action.ADMINISTER), status_code=200)
async def enable_slot(request: AnyRequest, agent_id: AgentId, slot_id: SlotId) -> SlotResponse:
    """The slot takes new work again."""
    return await _set_slot(request, agent_id, slot_id, True, False)


@post("/api/v1/agents/{agent_id:str}/slots/{slot_id:int}/disable", operation_id="DisableSlot", tags=["agents"],
      opt=opt(Action.ADMINISTER), status_code=200)
async def disable_slot(request: AnyRequest, agent_id: AgentId, slot_id: SlotId,
                       data: DisableSlotRequest | None = None) -> SlotResponse:
    """No new work on the slot; without drain, work running on it is preempted."""
    return await _set_slot(request, agent_id, slot_id, False, bool(data and data.drain))


ROUTES = [agent_socket, list_agents, enable_agent, disable_agent, enable_slot, disable_slot]
