"""The charts' JSON (``static/charts.js``): a metric series as uPlot draws it. The series are read
and downsampled by the database in ``services/metric_series.py``."""

from __future__ import annotations

from typing import Any

from controlplane.master.services.metric_series import Series


def series_json(series: Series) -> dict[str, Any]:
    return {"trialId": series.trial_id, "downsampled": series.downsampled, "x": series.x, "y": series.y}
