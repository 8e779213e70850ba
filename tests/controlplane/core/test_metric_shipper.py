"""The shipper batches reports in the background, encodes NaN/Inf, and loses nothing at close."""

from __future__ import annotations

import threading
import time

import pytest

from controlplane.core._metrics import MetricShipper
from controlplane.core._session import MasterError


class RecordingSession:
    def __init__(self, delay_s: float = 0.0, fail_with: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.delay_s = delay_s
        self.fail_with = fail_with
        self.lock = threading.Lock()

    def post(self, path: str, json: dict) -> None:  # noqa: A002
        time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        with self.lock:
            self.calls.append((path, json))


def test_reports_are_batched_and_all_flushed_at_close():
    session = RecordingSession(delay_s=0.05)  # a slow master: reports pile up into batches
    shipper = MetricShipper(session, trial_id=7)
    for step in range(1, 501):
        shipper.report("training", step, 2, {"loss": 1.0 / step})
    shipper.close()
    steps = [r["stepsCompleted"] for _, body in session.calls for r in body["reports"]]
    assert steps == list(range(1, 501))
    assert len(session.calls) < 100  # batched, not one call per report
    path, body = session.calls[0]
    assert path == "/api/v1/trials/7/metrics/batch"
    assert body["reports"][0]["trialRunId"] == 2 and body["reports"][0]["group"] == "training"


def test_non_finite_values_travel_as_strings():
    session = RecordingSession()
    shipper = MetricShipper(session, trial_id=1)
    shipper.report("validation", 1, 1, {"a": float("nan"), "b": float("inf"), "c": float("-inf"), "d": 0.5})
    shipper.flush()
    assert session.calls[0][1]["reports"][0]["metrics"]["avgMetrics"] == {
        "a": "NaN", "b": "Infinity", "c": "-Infinity", "d": 0.5}
    shipper.close()


def test_a_refused_batch_is_raised_to_the_training_code():
    shipper = MetricShipper(RecordingSession(fail_with=MasterError("POST", "u", 400, "bad group")), trial_id=1)
    shipper.report("training", 1, 1, {"loss": 1.0})
    with pytest.raises(RuntimeError, match="bad group"):
        shipper.flush()
    shipper.close()
