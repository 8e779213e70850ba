"""Experiments: create, list, get, trials, pause/activate/kill, model definition.

Changing an experiment (pause, activate, kill, cancel) and reading its code (the model
definition) need its owner or an admin; configs in answers are redacted (``serializers``).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Annotated, Any

from litestar import get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import QueryParameter
from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from controlplane.common.floats import decode_nonfinite
from controlplane.master.api.auth_guard import principal_of, runtime_of, user_of
from controlplane.master.api.params import ExperimentId, ListLimit, ListOffset, TrialId, page_limit
from controlplane.master.api.serializers import config_json, experiment_json, metrics_summary, pagination, trial_json
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.db.models import Experiment, Metric, Trial, User
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import progress
from controlplane.master.services import workspaces
from controlplane.master.services.experiment_requests import CreateExperimentRequest
from controlplane.master.services.experiments import create_experiment
from controlplane.master.services.metric_reads import summary_metrics

ProjectQuery = Annotated[int | None, QueryParameter(name="projectId", ge=0, le=2**31 - 1,
                                                   description="only this project's experiments; 0: all")]


async def _load(session: AsyncSession, exp_id: int) -> tuple[Experiment, str, list[int]]:
    exp = await session.get(Experiment, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    username = await session.scalar(select(User.username).where(User.id == exp.owner_id)) or ""
    trial_ids = list((await session.scalars(
        select(Trial.id).where(Trial.experiment_id == exp_id).order_by(Trial.id))).all())
    return exp, username, trial_ids


async def experiment_answer(session: AsyncSession, exp_id: int) -> tuple[Experiment, dict[str, Any]]:
    """One experiment, and its answer with its progress as of now."""
    exp, username, trial_ids = await _load(session, exp_id)
    done = await progress.of_experiments(session, [exp])
    names = await workspaces.project_names(session, {exp.project_id})
    return exp, experiment_json(exp, username, trial_ids, done[exp.id], names.get(exp.project_id))


@post("/api/v1/experiments", operation_id="CreateExperiment", opt=opt(Action.CREATE), tags=["experiments"],
      status_code=200, request_max_body_size=200 * 1024 * 1024)  # a context of up to 95 MiB, base64-encoded
async def create(request: AnyRequest, data: CreateExperimentRequest) -> dict[str, Any]:
    """``warnings`` is Determined's list of v1LaunchWarning values, which its client maps to fixed
    texts (an unknown value breaks it), so what this master has to say goes in ``warningMessages``."""
    user = user_of(request)
    rt = runtime_of(request)
    created = await create_experiment(rt, user, data)
    out = experiment_json(created.exp, user.username, [])
    if created.saved:
        async with rt.sessions() as session:
            _, out = await experiment_answer(session, created.exp.id)
    return {"experiment": out, "config": config_json(created.exp), "warnings": [],
            "warningMessages": list(created.warnings)}


@get("/api/v1/experiments", operation_id="GetExperiments", opt=opt(Action.VIEW), tags=["experiments"])
async def list_experiments(request: AnyRequest, limit: ListLimit = 200, offset: ListOffset = 0,
                           archived: bool | None = None, project_id: ProjectQuery = None) -> dict[str, Any]:
    users = request.query_params.getall("users", [])
    if any("\x00" in u or len(u) > 255 for u in users):
        raise BadRequest("users: a username has at most 255 characters and no NUL")
    rt = runtime_of(request)
    async with rt.sessions() as session:
        q = (select(Experiment, User.username).join(User, User.id == Experiment.owner_id)
             .options(defer(Experiment.model_definition), defer(Experiment.original_config)))
        if archived is not None:
            q = q.where(Experiment.archived.is_(archived))
        if project_id:  # Determined's 0: every project
            q = q.where(Experiment.project_id == project_id)
        if users:
            q = q.where(User.username.in_(users))
        total = await session.scalar(select(func.count()).select_from(q.subquery()))
        rows = (await session.execute(q.order_by(Experiment.id).offset(offset).limit(page_limit(limit)))).all()
        ids = [e.id for e, _ in rows]
        trials: dict[int, list[int]] = {i: [] for i in ids}
        if ids:
            for exp_id, tid in (await session.execute(select(Trial.experiment_id, Trial.id)
                                                      .where(Trial.experiment_id.in_(ids)).order_by(Trial.id))).all():
                trials[exp_id].append(tid)
        done = await progress.of_experiments(session, [e for e, _ in rows])
        names = await workspaces.project_names(session, {e.project_id for e, _ in rows})
    return {"experiments": [experiment_json(e, u, trials[e.id], done[e.id], names.get(e.project_id), original=False)
                            for e, u in rows],
            "pagination": pagination(offset, limit, total or 0, len(rows))}


@get("/api/v1/experiments/{exp_id:int}", operation_id="GetExperiment", opt=opt(Action.VIEW), tags=["experiments"])
async def get_experiment(request: AnyRequest, exp_id: ExperimentId) -> dict[str, Any]:
    async with runtime_of(request).sessions() as session:
        exp, out = await experiment_answer(session, exp_id)
    return {"experiment": out, "jobSummary": None, "config": config_json(exp)}


async def _validation_summaries(session: AsyncSession, trial_ids: list[int], metric: str,
                                smaller: bool) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """Per trial: (best validation, latest validation) as Determined's MetricsWorkload.

    Two indexed reads, a row or two per trial however many validations it has: the latest by
    (steps, id), the best at the steps the write path recorded with the searcher metric.
    """
    best: dict[int, dict[str, Any]] = {}
    latest: dict[int, dict[str, Any]] = {}
    if not trial_ids:
        return best, latest
    cols = (Metric.trial_id, Metric.steps_completed, Metric.metrics, Metric.report_time)
    newest = select(*cols, func.row_number().over(
        partition_by=Metric.trial_id, order_by=(Metric.steps_completed.desc(), Metric.id.desc())).label("rn")
    ).where(Metric.trial_id.in_(trial_ids), Metric.group == "validation").subquery()
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    newest_rows: Sequence[Any] = (await session.execute(select(newest).where(newest.c.rn == 1))).all()
    for tid, steps, metrics, at, _ in newest_rows:
        latest[tid] = metrics_summary(steps, metrics, at)
    at_best = (select(*cols).join(Trial, and_(Trial.id == Metric.trial_id,
                                              Metric.steps_completed == Trial.best_validation_steps))
               .where(Metric.trial_id.in_(trial_ids), Metric.group == "validation")
               .order_by(Metric.trial_id, Metric.id.desc()))
    best_rows: Sequence[Any] = (await session.execute(at_best)).all()
    for tid, steps, metrics, at in best_rows:
        summary = metrics_summary(steps, metrics, at)  # the first run's report at those steps wins
        summary["searcherMetric"] = decode_nonfinite(metrics.get(metric))
        best[tid] = summary
    return best, latest


@get("/api/v1/experiments/{exp_id:int}/trials", operation_id="GetExperimentTrials", opt=opt(Action.VIEW),
     tags=["experiments"])
async def experiment_trials(request: AnyRequest, exp_id: ExperimentId, offset: ListOffset = 0,
                            limit: ListLimit = 0) -> dict[str, Any]:
    async with runtime_of(request).sessions() as session:
        exp = await session.get(Experiment, exp_id)
        if exp is None:
            raise NotFound(f"experiment {exp_id} not found")
        q = select(Trial).where(Trial.experiment_id == exp_id).order_by(Trial.id)
        total = await session.scalar(select(func.count()).select_from(q.subquery()))
        trials = list((await session.scalars(q.offset(offset).limit(page_limit(limit)))).all())
        s = exp.config.get("searcher") or {}
        best, latest = await _validation_summaries(session, [t.id for t in trials], s.get("metric", ""),
                                                   bool(s.get("smaller_is_better", True)))
    return {"trials": [trial_json(t, exp.config, best.get(t.id), latest.get(t.id)) for t in trials],
            "pagination": pagination(offset, limit or len(trials), total or 0, len(trials))}


@get("/api/v1/trials/{trial_id:int}", operation_id="GetTrial", opt=opt(Action.VIEW, ("trial", "trial_id")),
     tags=["trials"])
async def get_trial(request: AnyRequest, trial_id: TrialId) -> dict[str, Any]:
    async with runtime_of(request).sessions() as session:
        trial = await session.get(Trial, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        exp = await session.get(Experiment, trial.experiment_id)
        s = exp.config.get("searcher") or {}
        best, latest = await _validation_summaries(session, [trial_id], s.get("metric", ""),
                                                   bool(s.get("smaller_is_better", True)))
        summary = await summary_metrics(session, trial_id)
    return {"trial": trial_json(trial, exp.config, best.get(trial_id), latest.get(trial_id), summary)}


async def owned_experiment(request: AnyRequest, exp_id: int, action: Action) -> Experiment:
    """The experiment, if the caller may ``action`` it (its owner or an admin), else 404/403."""
    async with runtime_of(request).sessions() as session:
        exp = await session.get(Experiment, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    require_owner(principal_of(request), action, exp.owner_id, f"experiment {exp_id}")
    return exp


def _action(name: str, operation_id: str, method_name: str) -> HTTPRouteHandler:
    @post(f"/api/v1/experiments/{{exp_id:int}}/{name}", operation_id=operation_id, tags=["experiments"],
          opt=opt(Action.EDIT), status_code=200, name=f"experiment-{name}")
    async def handler(request: AnyRequest, exp_id: ExperimentId) -> dict[str, Any]:
        await owned_experiment(request, exp_id, Action.EDIT)
        await getattr(runtime_of(request).orchestrator, method_name)(exp_id)
        return {}

    return handler


pause = _action("pause", "PauseExperiment", "pause")
activate = _action("activate", "ActivateExperiment", "activate")
kill = _action("kill", "KillExperiment", "kill")
cancel = _action("cancel", "CancelExperiment", "kill")


@get("/api/v1/experiments/{exp_id:int}/model_def", operation_id="GetModelDef", opt=opt(Action.READ_OWN),
     tags=["experiments"])
async def model_def(request: AnyRequest, exp_id: ExperimentId) -> dict[str, Any]:
    exp = await owned_experiment(request, exp_id, Action.READ_OWN)
    return {"b64Tgz": base64.b64encode(exp.model_definition).decode()}
