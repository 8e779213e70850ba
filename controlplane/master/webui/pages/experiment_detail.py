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
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware
from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ExperimentId
from controlplane.master.api.serializers import config_json
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Experiment, Trial
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import progress, searcher_runtime
from controlplane.master.services import experiment_reads, metric_series
from controlplane.master.webui import render
from controlplane.master.webui.pages.experiments import actions
from controlplane.searchers.asha import EXITED, AshaSearcher
from controlplane.searchers.registry import uses_validations

TRIALS_PAGE = 100
MAX_SCATTER = 1000  # trials in the hyperparameter view
TrialOffset = Annotated[int, Parameter(ge=0, le=2**31 - 1)]


@dataclass
class Rung:
    length: int
    entries: list[tuple[int | str, float | None]]  # (trial id, or request id if unknown; metric or None: exited)


def searcher_rungs(exp: Experiment, trial_of: dict[str, int]) -> list[list[Rung]] | None:
    """ASHA's brackets as stored in the searcher's snapshot; None for searchers without rungs (not
    loaded: the planned searchers' snapshots are never parsed for the page)."""
    if not uses_validations(exp.searcher.name):
        return None
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
    read = await experiment_reads.experiment_detail(session, exp, offset=offset, limit=TRIALS_PAGE,
                                                    max_with_metric=MAX_SCATTER)
    trials = read.trials
    searcher = exp.searcher
    now = datetime.now(UTC)
    return {
        "exp": exp, "owner": read.owner, "n_trials": read.n_trials, "trials": trials, "offset": offset,
        "page": TRIALS_PAGE, "progress": (await progress.of_experiments(session, [exp]))[exp.id],
        "duration_s": ((aware(exp.end_time) or now) - aware(exp.start_time)).total_seconds(),
        # A config may be up to the 1 MiB cap: dumping it is CPU work, kept off the event loop.
        "config_yaml": await asyncio.to_thread(yaml.safe_dump, config_json(exp), sort_keys=False,
                                               default_flow_style=False),
        "metric_names": await metric_series.metric_names(session, [t.id for t in trials[:metric_series.MAX_TRIALS]]),
        "searcher_metric": searcher.metric, "smaller_is_better": searcher.smaller_is_better,
        "scatter": scatter(read.with_metric), "rungs": searcher_rungs(exp, read.trial_of_request),
        "actions": actions(exp.state, exp.archived),
    }


@get("/experiments/{exp_id:int}", opt=opt(Action.VIEW), include_in_schema=False)
async def experiment_page(request: AnyRequest, exp_id: ExperimentId, offset: TrialOffset = 0) -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        exp = await experiment_reads.experiment_without_code(session, exp_id)
        if exp is None:
            return render.missing(request, f"Experiment {exp_id} does not exist.")
        context = await _context(session, exp, offset)
    return render.page(request, "experiment.html", **context)


ROUTES: list[Any] = [experiment_page]
