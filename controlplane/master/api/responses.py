"""Answers several handlers share."""

from __future__ import annotations

import msgspec


class EmptyResponse(msgspec.Struct):
    """``{}``: Determined's empty answers (v1PauseExperimentResponse, v1ReportTrialMetricsResponse, ...)."""
