"""One experiment (``/experiments/{id}``): its config (secrets redacted as the API redacts them),
trials with hyperparameters and best metrics, learning curves, metric against each
hyperparameter, and the searcher's decisions (ASHA's rungs)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import yaml
from litestar import Response, get
from litestar.params import Parameter
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from controlplane.common.timeutil import aware
from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ExperimentId
from controlplane.master.api.serializers import config_json
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Experiment, Trial, User
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import progress, searcher_runtime
from controlplane.master.webui import charts, render
from controlplane.master.webui.pages.experiments import actions
from controlplane.searchers.asha import EXITED, AshaSearcher

TRIALS_PAGE = 100
MAX_SCATTER = 1000  # trials in the hyperparameter view
TrialOffset = Annotated[int, Parameter(ge=0, le=2**31 - 1)]


@dataclass
class Rung:
    length: int
    entries: list[tuple[int | str, float | None]]  # (trial id, or request id if unknown; metric or None: exited)


def searcher_rungs(exp: Experiment, trial_of: dict[str, int]) -> list[list[Rung]] | None:
    """ASHA's brackets as stored in the searcher's snapshot; None for searchers without rungs."""
    try:
        searcher = searcher_runtime.load(exp)
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(searcher, AshaSearcher):
        return None
    sign = 1.0 if searcher.smaller_is_better else -1.0  # rungs rank by value, smaller first
    return [[Rung(r.units_needed, [(trial_of.get(rid, rid), None if v == EXITED else sign * v) for v, rid in r.metrics])
             for r in b.rungs] for b in searcher.brackets]


def scatter(trials: list[Trial]) -> dict[str, Any]:
    """Per hyperparameter, (value, best metric) of each trial with a metric: numbers as they
    are, other values (categorical) by their index in ``categories``."""
    out: dict[str, Any] = {}
    for t in trials:
        if t.searcher_metric_value is None:
            continue
        for name, value in (t.hparams or {}).items():
            h = out.setdefault(str(name), {"x": [], "y": [], "trials": [], "categories": []})
            if not isinstance(value, int | float) or isinstance(value, bool):
                label = str(value)[:64]
                if label not in h["categories"]:
                    h["categories"].append(label)
                value = h["categories"].index(label)
            h["x"].append(value)
            h["y"].append(t.searcher_metric_value)
            h["trials"].append(t.id)
    return out


async def _context(session: AsyncSession, exp: Experiment, offset: int) -> dict[str, Any]:
    owner = await session.scalar(select(User.username).where(User.id == exp.owner_id)) or ""
    n_trials = await session.scalar(select(func.count()).where(Trial.experiment_id == exp.id)) or 0
    trials = list((await session.scalars(select(Trial).where(Trial.experiment_id == exp.id).order_by(Trial.id)
                                         .offset(offset).limit(TRIALS_PAGE))).all())
    for_scatter = list((await session.scalars(
        select(Trial).where(Trial.experiment_id == exp.id, Trial.searcher_metric_value.is_not(None))
        .order_by(Trial.id).limit(MAX_SCATTER))).all())
    request_ids = {request_id: trial_id for request_id, trial_id in (await session.execute(
        select(Trial.request_id, Trial.id).where(Trial.experiment_id == exp.id).limit(100_000))).all()}
    searcher = exp.searcher
    now = datetime.now(UTC)
    return {
        "exp": exp, "owner": owner, "n_trials": n_trials, "trials": trials, "offset": offset,
        "page": TRIALS_PAGE, "progress": (await progress.of_experiments(session, [exp]))[exp.id],
        "duration_s": ((aware(exp.end_time) or now) - aware(exp.start_time)).total_seconds(),
        # A config may be up to the 1 MiB cap: dumping it is CPU work, kept off the event loop.
        "config_yaml": await asyncio.to_thread(yaml.safe_dump, config_json(exp), sort_keys=False,
                                               default_flow_style=False),
        "metric_names": await charts.metric_names(session, [t.id for t in trials[:charts.MAX_TRIALS]]),
        "searcher_metric": searcher.metric, "smaller_is_better": searcher.smaller_is_better,
        "scatter": scatter(for_scatter), "rungs": searcher_rungs(exp, request_ids),
        "actions": actions(exp.state, exp.archived),
    }


async def load_experiment(session: AsyncSession, exp_id: int) -> Experiment | None:
    """Without its code (up to 95 MiB) and submitted YAML, which no page shows."""
    return await session.scalar(select(Experiment).where(Experiment.id == exp_id)
                                .options(defer(Experiment.model_definition), defer(Experiment.original_config)))


@get("/experiments/{exp_id:int}", opt=opt(Action.VIEW), include_in_schema=False)
async def experiment_page(request: AnyRequest, exp_id: ExperimentId, offset: TrialOffset = 0) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        exp = await load_experiment(session, exp_id)
        if exp is None:
            return render.missing(request, f"Experiment {exp_id} does not exist.")
        context = await _context(session, exp, offset)
    return render.page(request, "experiment.html", **context)


ROUTES: list[Any] = [experiment_page]
