"""Checkpoint reports and lookups (reference §3 `det checkpoint`, §4.4 row 9)."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from litestar import Request, delete, get, post

from controlplane.common.floats import decode_nonfinite
from controlplane.master.api.auth_guard import current_user, require_trial, runtime_of, user_or_task
from controlplane.master.api.requests import expect_dict, field, path_int, read_json
from controlplane.master.api.serializers import checkpoint_json, pagination
from controlplane.master.errors import BadRequest
from controlplane.master.services import checkpoint_gc as gc
from controlplane.master.services import checkpoints as svc

SORT_BY_SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


@post("/api/v1/checkpoints", operation_id="ReportCheckpoint", opt=opt(Action.TASK_REPORT, "body"), tags=["checkpoints"], status_code=200)
async def report(request: Request) -> dict:
    principal = await user_or_task(request)
    await svc.report_checkpoint(runtime_of(request), principal, await read_json(request))
    return {}


@get("/api/v1/checkpoints/{ckpt_uuid:str}", operation_id="GetCheckpoint", opt=opt(Action.VIEW, "body"), tags=["checkpoints"])
async def get_checkpoint(request: Request, ckpt_uuid: str) -> dict:
    # Any task may read any checkpoint's record: warm starts restore another trial's checkpoint.
    await user_or_task(request)
    ckpt, config, validation = await svc.get_checkpoint(runtime_of(request), ckpt_uuid)
    return {"checkpoint": checkpoint_json(ckpt, config, validation)}


def _sorted(rows: list, config: dict, sort_by: str | None, order_by: str | None) -> list:
    if sort_by == SORT_BY_SEARCHER_METRIC:
        s = config.get("searcher") or {}
        metric, smaller = s.get("metric", ""), bool(s.get("smaller_is_better", True))

        def key(row):  # noqa: ANN001, ANN202
            value = decode_nonfinite((row[1] or {}).get(metric))
            if not isinstance(value, (int, float)) or value != value:
                return (1, 0.0)
            return (0, value if smaller else -value)

        return sorted(rows, key=key)
    if order_by == "ORDER_BY_DESC":
        return list(reversed(rows))
    return rows


@get("/api/v1/experiments/{exp_id:str}/checkpoints", operation_id="GetExperimentCheckpoints", opt=opt(Action.VIEW),
     tags=["experiments"])
async def experiment_checkpoints(request: Request, exp_id: str, limit: int = 0, offset: int = 0) -> dict:
    await current_user(request)
    rows, config = await svc.list_checkpoints(runtime_of(request), experiment_id=path_int(exp_id, "id"))
    rows = _sorted(rows, config, request.query_params.get("sortByAttr"), request.query_params.get("orderBy"))
    total = len(rows)
    page = rows[offset:offset + limit] if limit > 0 else rows[offset:]
    return {"checkpoints": [checkpoint_json(c, config, v) for c, v in page],
            "pagination": pagination(offset, limit, total, len(page))}


@get("/api/v1/trials/{trial_id:str}/checkpoints", operation_id="GetTrialCheckpoints", opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def trial_checkpoints(request: Request, trial_id: str, limit: int = 0, offset: int = 0) -> dict:
    principal = await user_or_task(request)
    tid = path_int(trial_id, "id")
    require_trial(principal, tid)
    rows, config = await svc.list_checkpoints(runtime_of(request), trial_id=tid)
    rows = _sorted(rows, config, request.query_params.get("sortByAttr"), request.query_params.get("orderBy"))
    total = len(rows)
    page = rows[offset:offset + limit] if limit > 0 else rows[offset:]
    return {"checkpoints": [checkpoint_json(c, config, v) for c, v in page],
            "pagination": pagination(offset, limit, total, len(page))}


@delete("/api/v1/checkpoints", operation_id="DeleteCheckpoints", opt=opt(Action.EDIT), tags=["checkpoints"], status_code=200)
async def delete_checkpoints(request: Request) -> dict:
    """`det checkpoint rm`: mark, delete the files, record; what fails stays marked and is retried."""
    user = await current_user(request)
    body = expect_dict(await read_json(request), "body")
    uuids = field(body, "checkpointUuids")
    if not isinstance(uuids, list) or not uuids or not all(isinstance(u, str) and u for u in uuids):
        raise BadRequest("checkpoint_uuids: a non-empty list of checkpoint UUIDs is required")
    rt = runtime_of(request)
    await gc.request_deletion(rt, list(dict.fromkeys(uuids)), user.username)
    report = await gc.drain(rt, only=set(uuids))
    if report.failed:
        rt.checkpoint_gc.deletions_pending()  # what failed stays marked: the GC loop retries it
    return {"deleted": report.deleted, "failed": report.failed}


ROUTES = [report, get_checkpoint, experiment_checkpoints, trial_checkpoints, delete_checkpoints]
