"""Resource pools and the job queue (reference §3: `det job`, `det resource-pool`, `det e set`)."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

import time

from litestar import Request, get, patch, post
from sqlalchemy import select

from controlplane.master.api.auth_guard import current_user, runtime_of
from controlplane.master.api.requests import path_int, read_json
from controlplane.master.api.serializers import experiment_json, pagination
from controlplane.master.api.autoscaler_json import describe_json
from controlplane.master.db.models import Experiment, Instance, Trial, User
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.services import jobs as svc

SCHEDULER_TYPES = {"priority": "SCHEDULER_TYPE_PRIORITY", "fair_share": "SCHEDULER_TYPE_FAIR_SHARE"}


@get("/api/v1/resource-pools", operation_id="GetResourcePools", opt=opt(Action.VIEW), tags=["cluster"])
async def resource_pools(request: Request) -> dict:
    await current_user(request)
    rt = runtime_of(request)
    async with rt.sessions() as session:
        rows = await svc.job_rows(session, rt)
    out = []
    for pool in rt.settings.pools:
        conns = [c for c in rt.hub.connections.values() if c.pool == pool.name]
        used = sum(r.allocated for r in rows if r.exp.resource_pool == pool.name)
        out.append({
            "name": pool.name, "description": pool.description, "type": "RESOURCE_POOL_TYPE_STATIC",
            "numAgents": len(conns), "slotsAvailable": sum(len(c.slots) for c in conns), "slotsUsed": used,
            "slotType": "TYPE_CUDA" if any(s.type == "cuda" for c in conns for s in c.slots) else "TYPE_CPU",
            "schedulerType": SCHEDULER_TYPES[pool.policy.scheduler],
            "schedulerFittingPolicy": f"FITTING_POLICY_{pool.policy.fitting_policy.upper()}",
            "preemptible": pool.policy.preemption, "defaultComputePool": pool.name == rt.settings.default_resource_pool,
            "defaultAuxPool": pool.name == rt.settings.default_aux_pool,
            "maxAuxContainersPerAgent": pool.policy.max_zero_slot_per_agent, "auxContainersRunning": 0,
            "provider": pool.provider.get("type", "") if pool.provider else "",
        })
    return {"resourcePools": out, "pagination": pagination(0, len(out), len(out), len(out))}


@get("/api/v1/job-queues-v2", operation_id="GetJobsV2", opt=opt(Action.VIEW), tags=["jobs"])
async def jobs_v2(request: Request, limit: int = 100, offset: int = 0) -> dict:
    await current_user(request)
    rt = runtime_of(request)
    pool = request.query_params.get("resourcePool") or None
    if pool is not None and rt.settings.pool(pool) is None:
        raise NotFound(f"pool {pool!r} not found")
    async with rt.sessions() as session:
        rows = await svc.job_rows(session, rt, pool)
    jobs = [{"full": svc.job_json(row, rt, ahead)} for ahead, row in enumerate(rows)]
    if request.query_params.get("orderBy") == "ORDER_BY_DESC":
        jobs.reverse()
    page = jobs[offset:offset + limit] if limit > 0 else jobs[offset:]
    return {"jobs": page, "pagination": pagination(offset, limit, len(jobs), len(page))}


@post("/api/v1/job-queues", operation_id="UpdateJobQueue", opt=opt(Action.EDIT), tags=["jobs"], status_code=200)
async def update_job_queue(request: Request) -> dict:
    await current_user(request)
    body = await read_json(request)
    updates = body.get("updates") if isinstance(body, dict) else None
    if not isinstance(updates, list) or not updates:
        raise BadRequest("updates: required (a list of job changes)")
    rt = runtime_of(request)
    async with rt.orchestrator.transaction() as session:
        for i, update in enumerate(updates):
            for alloc in await svc.apply_update(session, rt, update, f"updates[{i}]"):
                rt.orchestrator.request_preemption(alloc, "moved to another resource pool")
    rt.orchestrator.wake()
    return {}


@patch("/api/v1/experiments/{exp_id:str}", operation_id="PatchExperiment", opt=opt(Action.EDIT), tags=["experiments"])
async def patch_experiment(request: Request, exp_id: str) -> dict:
    user = await current_user(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequest("body: must be an object")
    body = body.get("experiment", body)  # {"experiment": {...}} as the generated client sends it
    rt = runtime_of(request)
    eid = path_int(exp_id, "id")
    async with rt.orchestrator.transaction() as session:
        exp = await session.get(Experiment, eid)
        if exp is None:
            raise NotFound(f"experiment {eid} not found")
        for key in ("name", "description", "notes"):
            if isinstance(body.get(key), str):
                setattr(exp, key, body[key])
        if isinstance(body.get("labels"), list):
            exp.labels = [str(x) for x in body["labels"]]
        resources = body.get("resources") or {}
        if not isinstance(resources, dict):
            raise BadRequest("resources: must be an object")
        if resources.get("priority") is not None:
            exp.priority = svc.check_priority(rt, exp, resources["priority"], "resources.priority")
        if resources.get("weight") is not None:
            exp.weight = svc.check_weight(rt, exp, resources["weight"], "resources.weight")
        if "maxSlots" in resources or "max_slots" in resources:
            exp.max_slots = svc.check_max_slots(resources.get("maxSlots", resources.get("max_slots")),
                                                "resources.maxSlots")
        await session.flush()
        username = await session.scalar(select(User.username).where(User.id == exp.owner_id)) or user.username
        trial_ids = list((await session.scalars(select(Trial.id).where(Trial.experiment_id == eid)
                                                .order_by(Trial.id))).all())
        out = experiment_json(exp, username, trial_ids)
    rt.orchestrator.wake()
    return {"experiment": out}


@get("/api/v1/resource-pools/{pool_name:str}/autoscaler", operation_id="DescribePoolAutoscaler", opt=opt(Action.VIEW),
     tags=["cluster"])
async def describe_pool(request: Request, pool_name: str) -> dict:
    """Instances with state, age and agent; what the autoscaler plans next; why it is not scaling."""
    await current_user(request)
    rt = runtime_of(request)
    pool = rt.settings.pool(pool_name)
    if pool is None:
        raise NotFound(f"pool {pool_name!r} not found")
    async with rt.sessions() as session:
        rows = (await session.scalars(select(Instance).where(Instance.pool == pool_name)
                                      .order_by(Instance.launched_at))).all()
    return describe_json(rt, pool, list(rows), time.time())


ROUTES = [resource_pools, jobs_v2, update_job_queue, patch_experiment, describe_pool]
