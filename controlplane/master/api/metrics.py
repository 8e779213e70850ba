"""Trial metrics, progress and runner state: what training code reports, what the CLI reads."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from litestar import Request, get, post
from sqlalchemy import select, update

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import require_trial, runtime_of, user_or_task
from controlplane.master.api.requests import field, path_int, read_json
from controlplane.master.api.serializers import pagination
from controlplane.master.db.models import Checkpoint, Experiment, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.services import metrics as svc

EARLY_EXIT_REASONS = {"EXITED_REASON_UNSPECIFIED", "EXITED_REASON_INVALID_HP",
                      "EXITED_REASON_INIT_INVALID_HP", "EXITED_REASON_USER_REQUESTED_STOP"}


async def _authorized_trial(request: Request, trial_id: str) -> int:
    principal = await user_or_task(request)
    tid = path_int(trial_id, "trialId")
    require_trial(principal, tid)
    return tid


@post("/api/v1/trials/{trial_id:str}/metrics", operation_id="ReportTrialMetrics", opt=opt(Action.TASK_REPORT, ("trial", "trial_id")), tags=["trials"],
      status_code=200)
async def report_metrics(request: Request, trial_id: str) -> dict:
    tid = await _authorized_trial(request, trial_id)
    report = svc.parse_single(await read_json(request))
    await svc.store_reports(runtime_of(request), tid, [report])
    return {}


@post("/api/v1/trials/{trial_id:str}/metrics/batch", operation_id="ReportTrialMetricsBatch", opt=opt(Action.TASK_REPORT, ("trial", "trial_id")), tags=["trials"],
      status_code=200)
async def report_metrics_batch(request: Request, trial_id: str) -> dict:
    tid = await _authorized_trial(request, trial_id)
    reports = svc.parse_batch(await read_json(request))
    await svc.store_reports(runtime_of(request), tid, reports)
    return {}


def _legacy(group: str, body_key: str, operation_id: str):  # noqa: ANN202
    """Determined's older per-group endpoints: {"trainingMetrics": {...}} / {"validationMetrics": {...}}."""

    @post(f"/api/v1/trials/{{trial_id:str}}/{group}_metrics", operation_id=operation_id, tags=["trials"],
          opt=opt(Action.TASK_REPORT, ("trial", "trial_id")),
          status_code=200, name=f"legacy-{group}-metrics")
    async def handler(request: Request, trial_id: str) -> dict:
        tid = await _authorized_trial(request, trial_id)
        body = await read_json(request)
        inner = field(body, body_key) if isinstance(body, dict) else None
        if not isinstance(inner, dict):
            raise BadRequest(f"{body_key}: required (an object)")
        report = svc.parse_report({**inner, "group": group}, body_key)
        await svc.store_reports(runtime_of(request), tid, [report])
        return {}

    return handler


report_training = _legacy("training", "trainingMetrics", "ReportTrialTrainingMetrics")
report_validation = _legacy("validation", "validationMetrics", "ReportTrialValidationMetrics")


@get("/api/v1/trials/{trial_id:str}/metrics", operation_id="GetTrialMetrics", opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def get_metrics(request: Request, trial_id: str, group: str | None = None) -> dict:
    tid = await _authorized_trial(request, trial_id)
    rows = await svc.trial_metrics(runtime_of(request), tid, group)
    return {"metrics": [{"group": m.group, "stepsCompleted": m.steps_completed, "trialRunId": m.trial_run_id,
                         "reportTime": iso(m.report_time), "metrics": m.metrics} for m in rows]}


@get("/api/v1/trials/{trial_id:str}/workloads", operation_id="GetTrialWorkloads", opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def workloads(request: Request, trial_id: str, offset: int = 0, limit: int = 0) -> dict:
    """Training, validation and checkpoint rows in step order (what `det e describe` merges)."""
    tid = await _authorized_trial(request, trial_id)
    rt = runtime_of(request)
    rows = await svc.trial_metrics(rt, tid, None)
    async with rt.sessions() as session:
        ckpts = (await session.scalars(select(Checkpoint).where(Checkpoint.trial_id == tid))).all()
    items: list[tuple[int, int, dict]] = []
    for m in rows:
        kind = m.group if m.group in ("training", "validation") else None
        if kind is None:
            continue
        items.append((m.steps_completed, 0 if kind == "training" else 1, {kind: {
            "totalBatches": m.steps_completed, "numInputs": 0, "endTime": iso(m.report_time),
            "metrics": {"avgMetrics": m.metrics, "batchMetrics": m.batch_metrics}}}))
    for c in ckpts:
        items.append((c.steps_completed, 2, {"checkpoint": {
            "totalBatches": c.steps_completed, "state": c.state, "uuid": c.uuid, "endTime": iso(c.report_time),
            "resources": {k: str(v) for k, v in (c.resources or {}).items()}, "metadata": c.metadata_}}))
    items.sort(key=lambda x: (x[0], x[1]))
    total = len(items)
    page = items[offset:offset + limit] if limit > 0 else items[offset:]
    return {"workloads": [w for _, _, w in page], "pagination": pagination(offset, limit, total, len(page))}


@post("/api/v1/trials/{trial_id:str}/progress", operation_id="ReportTrialProgress", opt=opt(Action.TASK_REPORT, ("trial", "trial_id")), tags=["trials"],
      status_code=200)
async def report_progress(request: Request, trial_id: str) -> dict:
    tid = await _authorized_trial(request, trial_id)
    body = await read_json(request)
    value = field(body, "progress") if isinstance(body, dict) else body
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise BadRequest(f"progress: must be a number between 0 and 1, got {value!r}")
    async with runtime_of(request).sessions.begin() as session:
        result = await session.execute(update(Trial).where(Trial.id == tid).values(progress=float(value)))
        if result.rowcount == 0:
            raise NotFound(f"trial {tid} not found")
    return {}


@post("/api/v1/trials/{trial_id:str}/runner/metadata", operation_id="UpdateTrialRunnerMetadata", opt=opt(Action.TASK_REPORT, ("trial", "trial_id")),
      tags=["trials"], status_code=200)
async def runner_metadata(request: Request, trial_id: str) -> dict:
    tid = await _authorized_trial(request, trial_id)
    body = await read_json(request)
    state = field(body, "state", "") if isinstance(body, dict) else ""
    if not isinstance(state, str):
        raise BadRequest(f"state: must be a string, got {state!r}")
    async with runtime_of(request).sessions.begin() as session:
        await session.execute(update(Trial).where(Trial.id == tid).values(runner_state=state[:64]))
    return {}


@post("/api/v1/trials/{trial_id:str}/early_exit", operation_id="ReportTrialEarlyExit", opt=opt(Action.TASK_REPORT, ("trial", "trial_id")), tags=["trials"],
      status_code=200)
async def early_exit(request: Request, trial_id: str) -> dict:
    tid = await _authorized_trial(request, trial_id)
    body = await read_json(request)
    reason = field(body, "reason") if isinstance(body, dict) else None
    if isinstance(reason, dict):  # {"earlyExit": {"reason": ...}} from older clients
        reason = reason.get("reason")
    if reason not in EARLY_EXIT_REASONS:
        raise BadRequest(f"reason: must be one of {', '.join(sorted(EARLY_EXIT_REASONS))}, got {reason!r}")
    async with runtime_of(request).sessions.begin() as session:
        trial = await session.get(Trial, tid)
        if trial is None:
            raise NotFound(f"trial {tid} not found")
        if trial.exit_reason:
            raise BadRequest(f"trial {tid} already reported an early exit")
        trial.exit_reason = reason
    return {}


@get("/api/v1/experiments/{exp_id:str}/searcher/best_searcher_validation_metric",
     operation_id="GetBestSearcherValidationMetric", opt=opt(Action.VIEW, "body"), tags=["experiments"])
async def best_validation(request: Request, exp_id: str) -> dict:
    await user_or_task(request)
    eid = path_int(exp_id, "experimentId")
    async with runtime_of(request).sessions() as session:
        exp = await session.get(Experiment, eid)
        if exp is None:
            raise NotFound(f"experiment {eid} not found")
        smaller = bool((exp.config.get("searcher") or {}).get("smaller_is_better", True))
        values = [v for v in (await session.scalars(select(Trial.searcher_metric_value).where(
            Trial.experiment_id == eid, Trial.searcher_metric_value.is_not(None)))).all()]
    if not values:
        raise NotFound(f"experiment {eid} has no validation metric yet")
    return {"metric": min(values) if smaller else max(values)}


@post("/api/v1/runs/start", operation_id="StartRun", opt=opt(Action.TASK_REPORT, "body"), tags=["runs"], status_code=200)
async def start_run(request: Request) -> dict:
    principal = await user_or_task(request)
    body = await read_json(request)
    run_id = field(body, "runId") if isinstance(body, dict) else None
    if not isinstance(run_id, int):
        raise BadRequest(f"runId: must be an integer, got {run_id!r}")
    require_trial(principal, run_id)
    return {"storageId": None}


@get("/api/v1/runs/{run_id:str}/metadata", operation_id="GetRunMetadata", opt=opt(Action.VIEW, "body"), tags=["runs"])
async def get_run_metadata(request: Request, run_id: str) -> dict:
    tid = await _authorized_trial(request, run_id)
    async with runtime_of(request).sessions() as session:
        if await session.get(Trial, tid) is None:
            raise NotFound(f"run {tid} not found")
    return {"metadata": {}}


ROUTES = [report_metrics, report_metrics_batch, report_training, report_validation, get_metrics, workloads,
          report_progress, runner_metadata, early_exit, best_validation, start_run, get_run_metadata]
