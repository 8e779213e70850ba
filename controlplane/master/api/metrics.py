"""Trial metrics, progress and runner state: what training code reports, what the CLI reads.

Bodies are msgspec Structs decoded by Litestar (Determined's camelCase wire format); writes go
through ``services/fencing.py`` inside their transaction; reads page (``services/paging.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import get, post
from litestar.params import Parameter

from controlplane.master.api.auth_guard import principal_of, require_trial, runtime_of
from controlplane.master.api.paging_params import Cursor, ExperimentId, Limit, Offset, TrialId
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.typed_body import TypedBody
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import metrics as svc
from controlplane.master.services import trial_reports as reports
from controlplane.master.services.workloads import WorkloadsPage, trial_workloads

EarlyExitReason = Literal["EXITED_REASON_UNSPECIFIED", "EXITED_REASON_INVALID_HP",
                          "EXITED_REASON_INIT_INVALID_HP", "EXITED_REASON_USER_REQUESTED_STOP"]
GroupQuery = Annotated[str | None, Parameter(min_length=1, max_length=64, pattern=r"^[^.\x00]+$",
                                             description="only this group (training, validation, ...)")]


class ProgressRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ReportTrialProgress body."""

    progress: Annotated[float, msgspec.Meta(ge=0, le=1)]
    is_raw: bool = False
    trial_id: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None


class RunnerMetadataRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1TrialRunnerMetadata (what the harness is doing: "training", ...)."""

    state: Annotated[str, msgspec.Meta(max_length=1024, pattern=svc.NO_NUL)] = ""


class EarlyExit(msgspec.Struct, rename="camel", kw_only=True):
    reason: EarlyExitReason


class EarlyExitRequest(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1TrialEarlyExit ``{"reason": ...}``; older clients wrap it in ``earlyExit``."""

    reason: EarlyExitReason | None = None
    early_exit: EarlyExit | None = None


class StartRunRequest(msgspec.Struct, rename="camel", kw_only=True):
    run_id: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    checkpoint_storage: dict[str, Any] | None = None


class StartRunResponse(msgspec.Struct, rename="camel", kw_only=True):
    storage_id: int | None = None


class RunMetadataResponse(msgspec.Struct, rename="camel", kw_only=True):
    metadata: dict[str, Any]


class BestValidationResponse(msgspec.Struct, rename="camel", kw_only=True):
    metric: float


REPORT = opt(Action.TASK_REPORT, ("trial", "trial_id"))


@post("/api/v1/trials/{trial_id:int}/metrics", operation_id="ReportTrialMetrics", opt=REPORT, tags=["trials"],
      status_code=200)
async def report_metrics(request: AnyRequest, trial_id: TrialId, data: svc.ReportTrialMetricsRequest) -> EmptyResponse:
    report = svc.single_report(data)
    await svc.store_reports(runtime_of(request), principal_of(request), trial_id, [report])
    return EmptyResponse()


@post("/api/v1/trials/{trial_id:int}/metrics/batch", operation_id="ReportTrialMetricsBatch", opt=REPORT,
      tags=["trials"], status_code=200, dto=TypedBody[svc.ReportBatchRequest], return_dto=None,
      request_max_body_size=64 * 1024 * 1024)  # up to 100,000 reports
async def report_metrics_batch(request: AnyRequest, trial_id: TrialId, data: svc.ReportBatchRequest) -> EmptyResponse:
    await svc.store_reports(runtime_of(request), principal_of(request), trial_id, svc.batch_reports(data))
    return EmptyResponse()


@post("/api/v1/trials/{trial_id:int}/training_metrics", operation_id="ReportTrialTrainingMetrics", opt=REPORT,
      tags=["trials"], status_code=200)
async def report_training(request: AnyRequest, trial_id: TrialId, data: svc.TrainingMetricsRequest) -> EmptyResponse:
    """Determined's older per-group endpoint: ``{"trainingMetrics": v1TrialMetrics}``."""
    report = svc.to_report(data.training_metrics, "training", "trainingMetrics")
    await svc.store_reports(runtime_of(request), principal_of(request), trial_id, [report])
    return EmptyResponse()


@post("/api/v1/trials/{trial_id:int}/validation_metrics", operation_id="ReportTrialValidationMetrics", opt=REPORT,
      tags=["trials"], status_code=200)
async def report_validation(request: AnyRequest, trial_id: TrialId,
                            data: svc.ValidationMetricsRequest) -> EmptyResponse:
    """Determined's older per-group endpoint: ``{"validationMetrics": v1TrialMetrics}``."""
    report = svc.to_report(data.validation_metrics, "validation", "validationMetrics")
    await svc.store_reports(runtime_of(request), principal_of(request), trial_id, [report])
    return EmptyResponse()


@get("/api/v1/trials/{trial_id:int}/metrics", operation_id="GetTrialMetrics",
     opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def get_metrics(request: AnyRequest, trial_id: TrialId, group: GroupQuery = None, limit: Limit = 1000,
                      offset: Offset = 0, cursor: Cursor = None) -> svc.MetricsPage:
    """A page of the trial's reports, in (group, step) order or step order within ``group``;
    follow ``nextCursor`` for the next page."""
    async with runtime_of(request).sessions() as session:
        return await svc.trial_metrics(session, trial_id, group, limit=limit, offset=offset, cursor=cursor)


@get("/api/v1/trials/{trial_id:int}/workloads", operation_id="GetTrialWorkloads",
     opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def workloads(request: AnyRequest, trial_id: TrialId, limit: Limit = 1000, offset: Offset = 0,
                    cursor: Cursor = None) -> WorkloadsPage:
    """Training, validation and checkpoint rows in step order (what `det e describe` merges), paged."""
    async with runtime_of(request).sessions() as session:
        return await trial_workloads(session, trial_id, limit=limit, offset=offset, cursor=cursor)


@post("/api/v1/trials/{trial_id:int}/progress", operation_id="ReportTrialProgress", opt=REPORT, tags=["trials"],
      status_code=200)
async def report_progress(request: AnyRequest, trial_id: TrialId, data: ProgressRequest) -> EmptyResponse:
    await reports.set_progress(runtime_of(request), principal_of(request), trial_id, data.progress)
    return EmptyResponse()


@post("/api/v1/trials/{trial_id:int}/runner/metadata", operation_id="UpdateTrialRunnerMetadata", opt=REPORT,
      tags=["trials"], status_code=200)
async def runner_metadata(request: AnyRequest, trial_id: TrialId, data: RunnerMetadataRequest) -> EmptyResponse:
    await reports.set_runner_state(runtime_of(request), principal_of(request), trial_id, data.state)
    return EmptyResponse()


@post("/api/v1/trials/{trial_id:int}/early_exit", operation_id="ReportTrialEarlyExit", opt=REPORT, tags=["trials"],
      status_code=200)
async def early_exit(request: AnyRequest, trial_id: TrialId, data: EarlyExitRequest) -> EmptyResponse:
    """Once per trial; the same reason again is a no-op (a retried request), another one a 409."""
    reason = data.reason or (data.early_exit.reason if data.early_exit else None)
    if reason is None:
        raise BadRequest("reason: required")
    await reports.early_exit(runtime_of(request), principal_of(request), trial_id, reason)
    return EmptyResponse()


@get("/api/v1/experiments/{exp_id:int}/searcher/best_searcher_validation_metric",
     operation_id="GetBestSearcherValidationMetric", opt=opt(Action.VIEW, "body"), tags=["experiments"])
async def best_validation(request: AnyRequest, exp_id: ExperimentId) -> BestValidationResponse:
    value = await reports.best_searcher_metric(runtime_of(request), principal_of(request), exp_id)
    return BestValidationResponse(metric=value)


@post("/api/v1/runs/start", operation_id="StartRun", opt=opt(Action.TASK_REPORT, "body"), tags=["runs"],
      status_code=200)
async def start_run(request: AnyRequest, data: StartRunRequest) -> StartRunResponse:
    principal = principal_of(request)
    require_trial(principal, data.run_id)
    owner = await reports.run_owner(runtime_of(request), data.run_id)
    require_owner(principal, Action.TASK_REPORT, owner, f"run {data.run_id}")
    return StartRunResponse()


@get("/api/v1/runs/{run_id:int}/metadata", operation_id="GetRunMetadata", opt=opt(Action.VIEW, "body"), tags=["runs"])
async def get_run_metadata(request: AnyRequest, run_id: TrialId) -> RunMetadataResponse:
    require_trial(principal_of(request), run_id)
    await reports.run_owner(runtime_of(request), run_id)  # NotFound for an unknown run
    return RunMetadataResponse(metadata={})

ROUTES = [report_metrics, report_metrics_batch, report_training, report_validation, get_metrics, workloads,
          report_progress, runner_metadata, early_exit, best_validation, start_run, get_run_metadata]
