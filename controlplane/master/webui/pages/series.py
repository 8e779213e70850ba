"""JSON for the charts (``static/charts.js``): one trial's series, or every trial's of an
experiment (up to ``metric_series.MAX_TRIALS``), downsampled by the database
(``services/metric_series.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ExperimentId, TrialId
from controlplane.master.authz import Action, opt
from controlplane.master.errors import NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import experiment_reads, metric_series
from controlplane.master.webui import charts

Group = Annotated[str, Parameter(min_length=1, max_length=64, pattern=metric_series.GROUP_NAME)]
MetricName = Annotated[str, Parameter(min_length=1, max_length=255, pattern=metric_series.METRIC_NAME)]
Points = Annotated[int, Parameter(ge=2, le=metric_series.MAX_POINTS)]
TrialOffset = Annotated[int, Parameter(ge=0, le=2**31 - 1)]


@get("/ui/data/trials/{trial_id:int}/series", opt=opt(Action.VIEW), include_in_schema=False)
async def trial_series(request: AnyRequest, trial_id: TrialId, metric: MetricName, group: Group = "training",
                       x: metric_series.XAxis = "batches",
                       points: Points = metric_series.DEFAULT_POINTS) -> dict[str, Any]:
    async with runtime_of(request).sessions() as session:
        if await experiment_reads.find_trial(session, trial_id) is None:
            raise NotFound(f"trial {trial_id} not found")
        series = await metric_series.trial_series(session, trial_id, group, metric, x, points)
    return {"group": group, "metric": metric, "x": x, "series": [charts.series_json(series)]}


@get("/ui/data/experiments/{exp_id:int}/series", opt=opt(Action.VIEW), include_in_schema=False)
async def experiment_series(request: AnyRequest, exp_id: ExperimentId, metric: MetricName, group: Group = "training",
                            x: metric_series.XAxis = "batches", points: Points = metric_series.DEFAULT_POINTS,
                            offset: TrialOffset = 0) -> dict[str, Any]:
    """Every trial's curve; ``points`` per trial, ``MAX_TRIALS`` trials from ``offset`` in id order."""
    async with runtime_of(request).sessions() as session:
        if await experiment_reads.find_experiment(session, exp_id) is None:
            raise NotFound(f"experiment {exp_id} not found")
        trial_ids = await metric_series.experiment_trials(session, exp_id, offset)
        out = [charts.series_json(await metric_series.trial_series(session, t, group, metric, x, points))
               for t in trial_ids]
    return {"group": group, "metric": metric, "x": x, "series": out}


ROUTES: list[Any] = [trial_series, experiment_series]
