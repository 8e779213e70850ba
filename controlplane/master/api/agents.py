"""Agents: the WebSocket they connect to, and GET /api/v1/agents for people."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

import asyncio
import hmac
import logging

import msgspec
from litestar import Request, WebSocket, get, post, websocket
from litestar.exceptions import WebSocketDisconnect
from sqlalchemy import select

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import bearer_token, current_user, runtime_of
from controlplane.master.db.models import Agent, Allocation
from controlplane.master.api.requests import read_json
from controlplane.master.errors import NotFound
from controlplane.master.orchestration import gang
from controlplane.master.orchestration.hub import AgentConnection
from controlplane.master.services import logs as log_service
from controlplane.state import allocation as A
from controlplane.wire import agent_protocol as wire

log = logging.getLogger("controlplane.master.agents")

CLOSE_BAD_TOKEN = 4401
CLOSE_BAD_MESSAGE = 4400


async def _writer(socket: WebSocket, conn: AgentConnection) -> None:
    while True:
        msg = await conn.outbox.get()
        if msg is None:  # replaced by a newer connection of the same agent
            await socket.close(code=1000, reason="replaced by a newer connection")
            return
        await socket.send_text(wire.encode(msg).decode())


@websocket("/agents/ws", name="agent-socket", opt=opt(Action.AGENT))
async def agent_socket(socket: WebSocket) -> None:
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
                           address=(first.addresses or ["127.0.0.1"])[0])
    registered = await rt.orchestrator.agent_registered(conn, first)
    await socket.send_text(wire.encode(registered).decode())
    writer = asyncio.create_task(_writer(socket, conn))
    try:
        while True:
            msg = wire.decode_from_agent(await socket.receive_text())
            if isinstance(msg, wire.TaskLogs):
                await log_service.ingest_agent_logs(rt, conn.agent_id, msg)
            elif isinstance(msg, wire.TaskStarted):
                await rt.orchestrator.task_started(conn.agent_id, msg)
            elif isinstance(msg, wire.TaskExited):
                await rt.orchestrator.task_exited(conn.agent_id, msg)
            elif isinstance(msg, wire.InstanceInterrupted):
                await rt.orchestrator.agent_interrupted(conn.agent_id, msg.reason)
    except WebSocketDisconnect:
        pass
    except msgspec.DecodeError as e:
        log.warning("agent %s sent a bad message: %s", conn.agent_id, e)
        await _close_quietly(socket, CLOSE_BAD_MESSAGE, "bad message")
    finally:
        writer.cancel()
        await rt.orchestrator.agent_disconnected(conn)


async def _close_quietly(socket: WebSocket, code: int, reason: str) -> None:
    try:
        await socket.close(code=code, reason=reason[:120])
    except Exception:  # already closed by the peer
        pass


def agent_json(agent: Agent, slot_use: dict[int, str], connected: bool) -> dict:
    slots = {}
    type_stats: dict[str, dict] = {}
    for s in agent.slots or []:
        device_type = "TYPE_CUDA" if s.get("type") == "cuda" else "TYPE_CPU"
        alloc = slot_use.get(s["id"])
        slots[str(s["id"])] = {
            "id": str(s["id"]),
            "device": {"id": s["id"], "brand": s.get("brand", ""), "uuid": s.get("uuid", ""), "type": device_type},
            "enabled": agent.enabled,
            "draining": agent.draining,
            "container": {"id": alloc, "state": "STATE_RUNNING", "permissionDenied": False} if alloc else None,
        }
        stats = type_stats.setdefault(device_type, {"states": {}, "total": 0, "disabled": 0, "draining": 0})
        stats["total"] += 1
    return {
        "id": agent.id,
        "registeredTime": iso(agent.registered_at),
        "lastSeen": iso(agent.last_seen),
        "connected": connected,
        "slots": slots,
        "resourcePools": [agent.resource_pool],
        "enabled": agent.enabled,
        "draining": agent.draining,
        "addresses": list(agent.addresses or []),
        "version": agent.version,
        "slotStats": {"typeStats": type_stats, "brandStats": {}},
    }


@get("/api/v1/agents", operation_id="GetAgents", opt=opt(Action.VIEW), tags=["agents"])
async def list_agents(request: Request) -> dict:
    await current_user(request)
    rt = runtime_of(request)
    async with rt.sessions() as session:
        agents = (await session.scalars(select(Agent).order_by(Agent.id))).all()
        use = await _slot_use(session)
    return {"agents": [agent_json(a, use.get(a.id, {}), a.id in rt.hub.connections) for a in agents]}


async def _slot_use(session) -> dict[str, dict[int, str]]:  # noqa: ANN001
    use: dict[str, dict[int, str]] = {}
    for alloc in (await session.scalars(select(Allocation).where(Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all():
        for r in gang.resources_of(alloc):
            for sid in r["slot_ids"]:
                use.setdefault(r["agent_id"], {})[sid] = alloc.id
    return use


def _toggle(enable: bool):  # noqa: ANN202
    action = "enable" if enable else "disable"

    @post(f"/api/v1/agents/{{agent_id:str}}/{action}", operation_id=f"{action.title()}Agent", tags=["agents"],
          opt=opt(Action.ADMINISTER),
          status_code=200, name=f"agent-{action}")
    async def handler(request: Request, agent_id: str) -> dict:
        """disable: no new work; without drain, running work is preempted (it checkpoints and
        resumes elsewhere); with drain, it finishes here."""
        await current_user(request)
        body = await read_json(request)
        drain = bool(isinstance(body, dict) and body.get("drain"))
        rt = runtime_of(request)
        async with rt.orchestrator.transaction() as session:
            agent = await session.get(Agent, agent_id)
            if agent is None:
                raise NotFound(f"agent {agent_id} not found")
            agent.enabled, agent.draining = enable, (not enable and drain)
            if not enable and not drain:
                for alloc in (await session.scalars(select(Allocation).where(
                        Allocation.state.in_((A.ASSIGNED, A.RUNNING))))).all():
                    if agent_id in gang.agents_of(alloc):
                        rt.orchestrator.request_preemption(alloc, f"agent {agent_id} disabled")
            use = await _slot_use(session)
            out = agent_json(agent, use.get(agent.id, {}), agent.id in rt.hub.connections)
        rt.orchestrator.wake()
        return {"agent": out}

    return handler


enable_agent = _toggle(True)
disable_agent = _toggle(False)

ROUTES = [agent_socket, list_agents, enable_agent, disable_agent]
