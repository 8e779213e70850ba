"""Every route of the experiment pages (list, detail, trial, chart data), for ``routes.py``."""

from __future__ import annotations

from typing import Any

from controlplane.master.webui.pages import experiment_detail, experiment_fork, experiments, series, trials

ROUTES: list[Any] = [*experiments.ROUTES, *experiment_detail.ROUTES, *experiment_fork.ROUTES, *trials.ROUTES,
                     *series.ROUTES]
