"""Resource pools and the job queue (reference §3: `det job`, `det resource-pool`, `det e set`).

Changing a job (its queue place, priority, weight, pool) or an experiment's settings needs its
owner or an admin; a batch of queue changes is checked whole before any is applied.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import get, patch, post

from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.autoscaler_json import PoolDescription, describe
from controlplane.master.api.params import ExperimentId, ListLimit, ListOffset, OrderBy, ResourcePoolQuery, page_limit
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.serializers import V1Experiment, experiment_read_json, pagination
from controlplane.master.authz import Action, opt
from controlplane.master.autoscaling import consolidation
from controlplane.master.errors import NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import progress
from controlplane.master.services import experiment_changes as changes
from controlplane.master.services import job_updates as updates
from controlplane.master.services import jobs as svc
from controlplane.master.services import paging, workspaces
from controlplane.master.services import resource_pools as pools_svc
from controlplane.master.services.experiment_requests import PatchExperimentRequest
from controlplane.master.services.paging import Pagination


class ResourcePoolsResponse(msgspec.Struct, rename="camel", kw_only=True):
    resource_pools: list[pools_svc.V1ResourcePool]
    pagination: Pagination


class V1RBACJob(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1RBACJob: every job is shown in ``full`` (a v1Job, ``services/jobs.job_json``)."""

    full: dict[str, Any]


class GetJobsV2Response(msgspec.Struct, rename="camel", kw_only=True):
    jobs: list[V1RBACJob]
    pagination: Pagination


class PatchExperimentResponse(msgspec.Struct, rename="camel", kw_only=True):
    experiment: V1Experiment


@get("/api/v1/resource-pools", operation_id="GetResourcePools", opt=opt(Action.VIEW), tags=["cluster"])
async def resource_pools(request: AnyRequest, limit: ListLimit = 0, offset: ListOffset = 0) -> ResourcePoolsResponse:
    """Every configured pool (a handful: the page is cut from master.yaml's list) with its live use."""
    rt = runtime_of(request)
    async with rt.sessions() as session:
        rows = await svc.job_rows(session, rt)
        aux = await svc.aux_running(session)
    out = []
    for pool in rt.settings.pools:
        conns = [c for c in rt.hub.connections.values() if c.pool == pool.name]
        use = pools_svc.PoolUse(
            agents=len(conns), slots=sum(len(c.slots) for c in conns),
            slots_used=sum(r.allocated for r in rows if r.resource_pool == pool.name),
            aux_running=aux.get(pool.name, 0), cuda=any(s.type == "cuda" for c in conns for s in c.slots),
            slots_per_agent=max((len(c.slots) for c in conns), default=0))
        out.append(pools_svc.pool_json(rt.settings, pool, use))
    page = out[offset:offset + page_limit(limit)]
    return ResourcePoolsResponse(resource_pools=page, pagination=paging.pagination(offset, limit, len(out), len(page)))


@get("/api/v1/job-queues-v2", operation_id="GetJobsV2", opt=opt(Action.VIEW), tags=["jobs"])
async def jobs_v2(request: AnyRequest, limit: ListLimit = 100, offset: ListOffset = 0,
                  resource_pool: ResourcePoolQuery = None, order_by: OrderBy = None) -> GetJobsV2Response:
    rt = runtime_of(request)
    pool = resource_pool or None
    if pool is not None and rt.settings.pool(pool) is None:
        raise NotFound(f"resourcePool: pool {pool!r} not found")
    async with rt.sessions() as session:
        rows = [row for row in await svc.job_rows(session, rt, pool) if svc.in_queue(row)]
        exps = [row.experiment for row in rows if row.experiment is not None]
        done = await progress.of_experiments(session, exps)
        names = await workspaces.project_names(session, {exp.project_id for exp in exps})
    jobs = []
    for ahead, row in enumerate(rows):
        exp = row.experiment
        if exp is None:  # commands, shells, notebooks and OpenPAI jobs: no progress, the default workspace
            jobs.append(V1RBACJob(full=svc.job_json(row, rt, ahead)))
            continue
        workspace_id = names[exp.project_id].workspace_id if exp.project_id in names else 1
        jobs.append(V1RBACJob(full=svc.job_json(row, rt, ahead, done[exp.id], workspace_id)))
    if order_by == "ORDER_BY_DESC":
        jobs.reverse()
    page = jobs[offset:offset + page_limit(limit)]
    return GetJobsV2Response(jobs=page, pagination=pagination(offset, limit, len(jobs), len(page)))


@post("/api/v1/job-queues", operation_id="UpdateJobQueue", opt=opt(Action.EDIT), tags=["jobs"], status_code=200)
async def update_job_queue(request: AnyRequest, data: updates.UpdateJobQueueRequest) -> EmptyResponse:
    """The whole batch is checked before anything changes, then applied in one transaction."""
    rt = runtime_of(request)
    async with rt.orchestrator.transaction() as session:
        changes = await updates.check(session, rt, principal_of(request), data.updates)
        to_preempt = await updates.apply(session, rt, changes)
        for alloc in to_preempt:  # only once the whole batch has been applied
            rt.orchestrator.request_preemption(alloc, "moved to another resource pool")
    rt.orchestrator.wake()  # the planner sees the new order (and may preempt for it) at once
    return EmptyResponse()


@patch("/api/v1/experiments/{exp_id:int}", operation_id="PatchExperiment", opt=opt(Action.EDIT), tags=["experiments"])
async def patch_experiment(request: AnyRequest, exp_id: ExperimentId,
                           data: PatchExperimentRequest) -> PatchExperimentResponse:
    read = await changes.patch(runtime_of(request), principal_of(request), exp_id, data)
    return PatchExperimentResponse(experiment=experiment_read_json(read))


@get("/api/v1/resource-pools/{pool_name:str}/autoscaler", operation_id="DescribePoolAutoscaler", opt=opt(Action.VIEW),
     tags=["cluster"])
async def describe_pool(request: AnyRequest, pool_name: str) -> PoolDescription:
    """Instances with state, age and agent; what the autoscaler plans next; why it is not scaling."""
    rt = runtime_of(request)
    pool = rt.settings.pool(pool_name)
    if pool is None:
        raise NotFound(f"pool {pool_name!r} not found")
    rows = await pools_svc.instances_of(rt, pool_name)
    async with rt.sessions() as session:
        moves = await consolidation.summary(session, pool_name)
    return describe(rt, pool, rows, time.time(), moves)


ROUTES = [resource_pools, jobs_v2, update_job_queue, patch_experiment, describe_pool]
