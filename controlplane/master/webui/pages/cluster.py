"""The Cluster page (``/cluster``): pools with their scheduler and capacity, agents and their
slots, the autoscaler's instances, plan and reasons (what `det resource-pool describe` shows, from
the same ``describe_json``), and spend per pool and per experiment over time.

Every read is bounded: agents paged, the newest ``MAX_INSTANCES`` instances per pool, the spend
series capped by ``services/spend.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from litestar import Response, get
from litestar.params import Parameter, QueryParameter

from controlplane.common.timeutil import utcnow
from controlplane.master.api.agents import V1Agent, agent_json
from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.autoscaler_json import describe_json
from controlplane.master.api.params import ListOffset
from controlplane.master.authz import Action, opt
from controlplane.master.autoscaling import consolidation
from controlplane.master.autoscaling.service import scaling_of
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import agents as agent_reads
from controlplane.master.services import experiment_reads, resource_pools, spend
from controlplane.master.services.slot_use import slot_use
from controlplane.master.webui import render

MAX_PAGE = 200
MAX_INSTANCES = 50  # per pool: every live one first, then the most recently launched
PageLimit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description="agents per page")]


class SpendWindow(StrEnum):
    DAY = "24h"
    WEEK = "7d"
    MONTH = "30d"


WINDOWS = {SpendWindow.DAY: (timedelta(hours=24), timedelta(hours=1)),
           SpendWindow.WEEK: (timedelta(days=7), timedelta(days=1)),
           SpendWindow.MONTH: (timedelta(days=30), timedelta(days=1))}


SpendQuery = Annotated[SpendWindow, QueryParameter(name="spend", description="the spend table's window")]


@dataclass(frozen=True)
class PoolView:
    name: str
    description: str
    scheduler: str
    agents: int  # connected
    slots: int
    used: int
    provider: str
    min_instances: int | None
    max_instances: int | None


@dataclass(frozen=True)
class AgentView:
    agent: V1Agent
    pool: str
    used: int


@get("/cluster", opt=opt(Action.VIEW), include_in_schema=False)
async def cluster_page(request: AnyRequest, limit: PageLimit = 50, offset: ListOffset = 0,
                       spend_window: SpendQuery = SpendWindow.WEEK) -> Response[Any]:
    rt = runtime_of(request)
    now, t_now = utcnow(), time.time()
    known = set(rt.hub.connections) | set(rt.hub.away_since)  # connected or within their reconnect window
    window, bucket = WINDOWS[spend_window]
    async with rt.sessions() as session:
        use = await slot_use(session)
        agents, total_agents = await agent_reads.page_of(session, known, offset=offset, limit=limit)
        described = []
        for pool in rt.settings.pools:
            if pool.provider:
                rows = await resource_pools.recent_instances(session, pool.name, MAX_INSTANCES)
                moves = await consolidation.summary(session, pool.name)
                described.append(describe_json(rt, pool, rows, t_now, moves))
        series = await spend.spend_over_time(session, now, window=window, bucket=bucket)
        names = await experiment_reads.experiment_names(session, list(series.experiments))
    pools = []
    for pool in rt.settings.pools:
        conns = [c for c in rt.hub.connections.values() if c.pool == pool.name]
        scaling = scaling_of(pool) if pool.provider else None
        pools.append(PoolView(
            name=pool.name, description=pool.description, scheduler=pool.policy.scheduler, agents=len(conns),
            slots=sum(len(c.slots) for c in conns), used=sum(len(use.get(c.agent_id, {})) for c in conns),
            provider=str((pool.provider or {}).get("type", "")),
            min_instances=scaling.min_instances if scaling else None,
            max_instances=scaling.max_instances if scaling else None))
    agent_views = [AgentView(agent_json(a, use.get(a.id, {}), a.id in rt.hub.connections,
                                        rt.hub.environments.get(a.id, ()), rt.hub.instance_types.get(a.id, "")),
                             a.resource_pool, len(use.get(a.id, {})))
                   for a in agents]
    return render.page(request, "cluster.html", pools=pools, agents=agent_views, total_agents=total_agents,
                       limit=limit, offset=offset, described=described, series=series, exp_names=names,
                       bucket_starts=[datetime.fromtimestamp(t, UTC) for t in series.times],
                       spend_window=spend_window.value, windows=[w.value for w in SpendWindow],
                       self_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""))


ROUTES: list[Any] = [cluster_page]
