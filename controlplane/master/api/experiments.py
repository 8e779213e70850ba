"""Experiments: create, list, get, trials, pause/activate/kill, model definition.

Changing an experiment (pause, activate, kill, cancel) and reading its code (the model
definition) need its owner or an admin; configs in answers are redacted (``serializers``).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import msgspec
from litestar import get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import QueryParameter
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.floats import decode_nonfinite
from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import (
    MAX_ID,
    ExperimentId,
    ListLimit,
    ListOffset,
    OrderBy,
    QueryText,
    SortBy,
    TrialId,
    page_limit,
)
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.api.serializers import (
    V1Experiment,
    V1MetricsWorkload,
    V1Trial,
    config_json,
    experiment_json,
    experiment_read_json,
    metrics_summary,
    pagination,
    trial_json,
)
from controlplane.master.api.typed_body import TypedBody
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Experiment, Trial
from controlplane.master.errors import BadRequest
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import experiment_changes as changes
from controlplane.master.services import experiment_list, run_summaries
from controlplane.master.services import experiment_reads as reads
from controlplane.master.services.experiment_requests import CreateExperimentRequest
from controlplane.master.services.experiments import create_experiment
from controlplane.master.services.metric_reads import summary_metrics
from controlplane.master.services.paging import Pagination

ProjectQuery = Annotated[int | None, QueryParameter(name="projectId", ge=0, le=2**31 - 1,
                                                   description="only this project's experiments; 0: all")]
Strings = Annotated[list[str] | None, QueryParameter(max_items=100)]
Users = Annotated[list[str] | None, QueryParameter(max_items=100, description="owners' usernames")]
UserIds = Annotated[list[int] | None, QueryParameter(name="userIds", max_items=100, description="owners' ids")]
States = Annotated[list[str] | None, QueryParameter(max_items=32, description="STATE_* names")]
ShowTrialData = Annotated[bool | None, QueryParameter(name="showTrialData")]
# Determined's Int32FieldFilter on the id, sent as experimentIdFilter.<field> (incl/notIn repeated).
IdGt = Annotated[int | None, QueryParameter(name="experimentIdFilter.gt", ge=-MAX_ID - 1, le=MAX_ID)]
IdGte = Annotated[int | None, QueryParameter(name="experimentIdFilter.gte", ge=-MAX_ID - 1, le=MAX_ID)]
IdLt = Annotated[int | None, QueryParameter(name="experimentIdFilter.lt", ge=-MAX_ID - 1, le=MAX_ID)]
IdLte = Annotated[int | None, QueryParameter(name="experimentIdFilter.lte", ge=-MAX_ID - 1, le=MAX_ID)]
IdIn = Annotated[list[int] | None, QueryParameter(name="experimentIdFilter.incl",
                                                  max_items=experiment_list.MAX_FILTER_VALUES)]
IdNotIn = Annotated[list[int] | None, QueryParameter(name="experimentIdFilter.notIn",
                                                     max_items=experiment_list.MAX_FILTER_VALUES)]


class CreateExperimentResponse(msgspec.Struct, rename="camel", kw_only=True):
    experiment: V1Experiment
    config: dict[str, Any]  # the user's config (redacted)
    warnings: list[str]  # Determined's v1LaunchWarning values
    warning_messages: list[str]


class GetExperimentsResponse(msgspec.Struct, rename="camel", kw_only=True):
    experiments: list[V1Experiment]
    pagination: Pagination


class GetExperimentResponse(msgspec.Struct, rename="camel", kw_only=True):
    experiment: V1Experiment
    job_summary: dict[str, Any] | None
    config: dict[str, Any]  # the user's config (redacted)


class GetExperimentTrialsResponse(msgspec.Struct, rename="camel", kw_only=True):
    trials: list[V1Trial]
    pagination: Pagination


class GetTrialResponse(msgspec.Struct, rename="camel", kw_only=True):
    trial: V1Trial


class GetModelDefResponse(msgspec.Struct, kw_only=True):
    b64_tgz: str = msgspec.field(name="b64Tgz")  # the experiment's context, a base64 tar.gz


async def experiment_answer(session: AsyncSession, exp_id: int) -> tuple[Experiment, V1Experiment]:
    """One experiment, and its answer with its progress as of now."""
    read = await reads.experiment(session, exp_id)
    return read.exp, experiment_read_json(read)


def _validation_json(found: reads.Validation | None, metric: str | None = None) -> V1MetricsWorkload | None:
    if found is None:
        return None
    out = metrics_summary(found.steps, found.metrics, found.at)
    if metric is not None:
        out.searcher_metric = decode_nonfinite(found.metrics.get(metric))
    return out


def _trial_answer(trial: Trial, exp: Experiment, best: dict[int, reads.Validation],
                  latest: dict[int, reads.Validation], checkpoints: dict[int, run_summaries.TrialSummary],
                  summary: dict[str, Any] | None = None) -> V1Trial:
    return trial_json(trial, exp.config, _validation_json(best.get(trial.id), exp.searcher.metric),
                      _validation_json(latest.get(trial.id)), summary, checkpoints.get(trial.id))


@post("/api/v1/experiments", operation_id="CreateExperiment", opt=opt(Action.CREATE), tags=["experiments"],
      status_code=200, request_max_body_size=200 * 1024 * 1024,  # a context of up to 95 MiB, base64-encoded
      dto=TypedBody[CreateExperimentRequest], return_dto=None)  # one msgspec pass; `config` kept as JSON
async def create(request: AnyRequest, data: CreateExperimentRequest) -> CreateExperimentResponse:
    """``warnings`` is Determined's list of v1LaunchWarning values, which its client maps to fixed
    texts (an unknown value breaks it), so what this master has to say goes in ``warningMessages``."""
    user = user_of(request)
    rt = runtime_of(request)
    created = await create_experiment(rt, user, data)
    out = experiment_json(created.exp, user.username, [])
    if created.saved:
        async with rt.sessions() as session:
            _, out = await experiment_answer(session, created.exp.id)
    return CreateExperimentResponse(experiment=out, config=config_json(created.exp), warnings=[],
                                    warning_messages=list(created.warnings))


@get("/api/v1/experiments", operation_id="GetExperiments", opt=opt(Action.VIEW), tags=["experiments"])
async def list_experiments(request: AnyRequest, limit: ListLimit = 200, offset: ListOffset = 0,
                           archived: bool | None = None, project_id: ProjectQuery = None,
                           name: QueryText = None, description: QueryText = None, labels: Strings = None,
                           states: States = None, users: Users = None, user_ids: UserIds = None,
                           id_gt: IdGt = None, id_gte: IdGte = None, id_lt: IdLt = None, id_lte: IdLte = None,
                           id_in: IdIn = None, id_not_in: IdNotIn = None, sort_by: SortBy = None,
                           order_by: OrderBy = None, show_trial_data: ShowTrialData = None) -> GetExperimentsResponse:
    """Determined's GetExperiments filters and orders (``services/experiment_list.py``);
    ``showTrialData`` is accepted: the best trial's id and metric are always in the answer."""
    if any("\x00" in u or len(u) > 255 for u in users or []):
        raise BadRequest("users: a username has at most 255 characters and no NUL")
    for value in user_ids or []:
        if not 0 <= value <= MAX_ID:
            raise BadRequest(f"userIds: {value} is not a user id (0..{MAX_ID})")
    f = experiment_list.ExperimentFilter(
        name=name, description=description, labels=labels or [], archived=archived, states=states or [],
        users=users or [], user_ids=user_ids or [], project_id=project_id, id_gt=id_gt, id_gte=id_gte,
        id_lt=id_lt, id_lte=id_lte, id_in=id_in, id_not_in=id_not_in, sort_by=sort_by, order_by=order_by).check()
    async with runtime_of(request).sessions() as session:
        rows, total = await reads.experiments_page(session, f, offset=offset, limit=page_limit(limit))
    return GetExperimentsResponse(experiments=[experiment_read_json(r, original=False) for r in rows],
                                  pagination=pagination(offset, limit, total, len(rows)))


@get("/api/v1/experiments/{exp_id:int}", operation_id="GetExperiment", opt=opt(Action.VIEW), tags=["experiments"])
async def get_experiment(request: AnyRequest, exp_id: ExperimentId) -> GetExperimentResponse:
    async with runtime_of(request).sessions() as session:
        exp, out = await experiment_answer(session, exp_id)
    return GetExperimentResponse(experiment=out, job_summary=None, config=config_json(exp))


@get("/api/v1/experiments/{exp_id:int}/trials", operation_id="GetExperimentTrials", opt=opt(Action.VIEW),
     tags=["experiments"])
async def experiment_trials(request: AnyRequest, exp_id: ExperimentId, offset: ListOffset = 0,
                            limit: ListLimit = 0) -> GetExperimentTrialsResponse:
    async with runtime_of(request).sessions() as session:
        exp, trials, total = await reads.trials_page(session, exp_id, offset=offset, limit=page_limit(limit))
        best, latest = await reads.validation_summaries(session, [t.id for t in trials])
        checkpoints = await run_summaries.trials(session, trials)
    return GetExperimentTrialsResponse(trials=[_trial_answer(t, exp, best, latest, checkpoints) for t in trials],
                                       pagination=pagination(offset, limit or len(trials), total, len(trials)))


@get("/api/v1/trials/{trial_id:int}", operation_id="GetTrial", opt=opt(Action.VIEW, ("trial", "trial_id")),
     tags=["trials"])
async def get_trial(request: AnyRequest, trial_id: TrialId) -> GetTrialResponse:
    async with runtime_of(request).sessions() as session:
        trial, exp = await reads.trial(session, trial_id)
        best, latest = await reads.validation_summaries(session, [trial_id])
        summary = await summary_metrics(session, trial_id)
        checkpoints = await run_summaries.trials(session, [trial])
    return GetTrialResponse(trial=_trial_answer(trial, exp, best, latest, checkpoints, summary))


async def owned_experiment(request: AnyRequest, exp_id: int, action: Action) -> Experiment:
    """The experiment, if the caller may ``action`` it (its owner or an admin), else 404/403."""
    return await changes.owned(runtime_of(request), principal_of(request), exp_id, action)


def _action(name: str, operation_id: str, method_name: str) -> HTTPRouteHandler:
    @post(f"/api/v1/experiments/{{exp_id:int}}/{name}", operation_id=operation_id, tags=["experiments"],
          opt=opt(Action.EDIT), status_code=200, name=f"experiment-{name}")
    async def handler(request: AnyRequest, exp_id: ExperimentId) -> EmptyResponse:
        await owned_experiment(request, exp_id, Action.EDIT)
        await getattr(runtime_of(request).orchestrator, method_name)(exp_id)
        return EmptyResponse()

    return handler


pause = _action("pause", "PauseExperiment", "pause")
activate = _action("activate", "ActivateExperiment", "activate")
kill = _action("kill", "KillExperiment", "kill")
cancel = _action("cancel", "CancelExperiment", "cancel")  # graceful: its trials checkpoint and stop


@get("/api/v1/experiments/{exp_id:int}/model_def", operation_id="GetModelDef", opt=opt(Action.READ_OWN),
     tags=["experiments"])
async def model_def(request: AnyRequest, exp_id: ExperimentId) -> GetModelDefResponse:
    await owned_experiment(request, exp_id, Action.READ_OWN)
    async with runtime_of(request).sessions() as session:
        archive = await reads.model_definition(session, exp_id)
    return GetModelDefResponse(b64_tgz=base64.b64encode(archive).decode())
