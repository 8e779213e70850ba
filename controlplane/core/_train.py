"""ctx.train: metric reports (batched by the shipper) and progress; printed off the cluster."""

from __future__ import annotations

import math
from typing import Any

from controlplane.core._metrics import MetricShipper
from controlplane.core._session import MasterError, Session


def _printable(metrics: dict) -> str:
    return " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


class TrainContext:
    def __init__(self, shipper: MetricShipper | None, session: Session | None, trial_id: int | None,
                 experiment_id: int | None, trial_run_id: int = 0) -> None:
        self._shipper = shipper
        self._session = session
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._run_id = trial_run_id

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        if not isinstance(group, str) or not group or "." in group:
            raise ValueError(f"metric group must be a non-empty name without '.', got {group!r}")
        if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
            raise ValueError(f"steps_completed must be an integer >= 0, got {steps_completed!r}")
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        metrics = {k: v for k, v in metrics.items() if not isinstance(v, bytes)}
        if self._shipper is None:
            print(f"[metrics] {group} step={steps_completed} {_printable(metrics)}", flush=True)
            return
        self._shipper.report(group, steps_completed, self._run_id, metrics)

    def report_training_metrics(self, steps_completed: int, metrics: dict[str, Any],
                                batch_metrics: list | None = None) -> None:
        self.report_metrics("training", steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            if value is None:
                raise ValueError(f"validation metric {key!r} is None")
        self.report_metrics("validation", steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        if not 0 <= progress <= 1 or math.isnan(progress):
            raise ValueError(f"progress must be between 0 and 1, got {progress}")
        if self._session is not None and self._trial_id is not None:
            self._session.post(f"/api/v1/trials/{self._trial_id}/progress",
                               json={"progress": progress, "is_raw": True})

    def get_experiment_best_validation(self) -> float | None:
        if self._session is None or self._experiment_id is None:
            return None
        try:
            return self._session.get(
                f"/api/v1/experiments/{self._experiment_id}/searcher/best_searcher_validation_metric").json()["metric"]
        except MasterError as e:
            if e.status == 404:
                return None
            raise
