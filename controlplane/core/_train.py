"""ctx.train (mirrors determined.core.TrainContext): metric reports, progress, best validation.

On the cluster reports go through the batching :class:`MetricShipper`; off it each report is
printed as one line (``[metrics] validation step=100 loss=0.12``) so a laptop run shows them.

With several workers only the chief reports: the other workers' metric and progress reports are
checked the same way and then dropped (the chief reports the trial's numbers once).
"""

from __future__ import annotations

import enum
import math
from typing import Any

from controlplane.core._metrics import MetricShipper, is_number, plain
from controlplane.core._session import MasterError, Session


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


def _printable(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def _check_steps(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) or steps_completed < 0:
        raise ValueError(f"steps_completed must be an integer >= 0, got {steps_completed!r}")
    return steps_completed


class TrainContext:
    def __init__(self, shipper: MetricShipper | None, session: Session | None, trial_id: int | None,
                 experiment_id: int | None, trial_run_id: int = 0, *, is_chief: bool = True) -> None:
        self._shipper = shipper
        self._session = session
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._run_id = trial_run_id
        self._is_chief = is_chief

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any],
                       batch_metrics: list[Any] | None = None) -> None:
        """Any group name without '.'; ``training``/``validation`` have their own helpers."""
        if not isinstance(group, str) or not group or "." in group:
            raise ValueError(f"metric group must be a non-empty name without '.', got {group!r}")
        _check_steps(steps_completed)
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        metrics = {k: v for k, v in metrics.items() if not isinstance(v, bytes)}  # as Determined does
        if not self._is_chief:
            return
        if self._shipper is None:
            print(f"[metrics] {group} step={steps_completed} {_printable(metrics)}", flush=True)
            return
        self._shipper.report(group, steps_completed, self._run_id, metrics, batch_metrics)

    def report_training_metrics(self, steps_completed: int, metrics: dict[str, Any],
                                batch_metrics: list[Any] | None = None) -> None:
        self.report_metrics("training", steps_completed, metrics, batch_metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Values must be numbers: the searcher compares them. NaN/±Inf are allowed."""
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        for key, value in metrics.items():
            if value is None:
                raise ValueError(f"validation metric {key!r} is None")
            if not isinstance(value, bytes) and not is_number(plain(value)):
                raise ValueError(f"validation metric {key!r} must be a number, got {value!r}")
        self.report_metrics("validation", steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        """Fraction done in [0, 1]: POST /api/v1/trials/{id}/progress {"progress": x, "isRaw": true}."""
        progress = float(progress)
        if math.isnan(progress) or not 0 <= progress <= 1:
            raise ValueError(f"progress must be between 0 and 1, got {progress}")
        if self._is_chief and self._session is not None and self._trial_id is not None:
            self._session.post(f"/api/v1/trials/{self._trial_id}/progress",
                               json={"progress": progress, "isRaw": True})

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Tells the master the trial stops on purpose (409 = another reason was reported first, ignored)."""
        if self._session is None or self._trial_id is None:
            return
        try:
            self._session.post(f"/api/v1/trials/{self._trial_id}/early_exit", json={"reason": reason.value})
        except MasterError as e:
            if e.status not in (400, 409):
                raise

    def get_experiment_best_validation(self) -> float | None:
        """The experiment's best searcher metric so far; None off the cluster or before any."""
        if self._session is None or self._experiment_id is None:
            return None
        try:
            return self._session.get(
                f"/api/v1/experiments/{self._experiment_id}/searcher/best_searcher_validation_metric").json()["metric"]
        except MasterError as e:
            if e.status == 404:
                return None
            raise
