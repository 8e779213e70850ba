"""The shipper batches reports in the background, encodes NaN/Inf, and loses nothing at close."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from controlplane.core._metrics import MetricShipper
from controlplane.core._session import MasterError


class RecordingSession:
    """Stands in for core._session.Session: records each batch body; can fail the first calls."""

    def __init__(self, delay_s: float = 0.0, failures: list[Exception] | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.delay_s = delay_s
        self.failures = list(failures or [])
        self.lock = threading.Lock()
        self.closed = False

    def post(self, path: str, *, data: str, retry: bool = True) -> None:
        time.sleep(self.delay_s)
        if self.failures:
            raise self.failures.pop(0)
        with self.lock:
            self.calls.append((path, json.loads(data)))

    def close(self) -> None:
        self.closed = True


def _steps(session: RecordingSession) -> list[int]:
    return [r["stepsCompleted"] for _, body in session.calls for r in body["reports"]]


def test_reports_are_batched_and_all_flushed_at_close():
    session = RecordingSession(delay_s=0.05)  # a slow master: reports pile up into batches
    shipper = MetricShipper(session, trial_id=7)
    for step in range(1, 501):
        shipper.report("training", step, 2, {"loss": 1.0 / step})
    shipper.close()
    assert _steps(session) == list(range(1, 501))
    assert len(session.calls) < 100  # batched, not one call per report
    path, body = session.calls[0]
    assert path == "/api/v1/trials/7/metrics/batch"
    assert body["reports"][0]["trialRunId"] == 2 and body["reports"][0]["group"] == "training"
    assert session.closed


def test_non_finite_and_numpy_values_travel_as_json():
    session = RecordingSession()
    shipper = MetricShipper(session, trial_id=1)
    shipper.report("validation", 1, 1, {"a": float("nan"), "b": float("inf"), "c": float("-inf"), "d": 0.5,
                                        "e": np.float32(0.25), "f": np.int64(3), "g": np.float64("nan")})
    shipper.flush()
    assert session.calls[0][1]["reports"][0]["metrics"]["avgMetrics"] == {
        "a": "NaN", "b": "Infinity", "c": "-Infinity", "d": 0.5, "e": 0.25, "f": 3, "g": "NaN"}
    shipper.close()


def test_transient_failures_retry_the_same_batch():
    down = MasterError("POST", "u", 0, "master unreachable")
    session = RecordingSession(failures=[down, MasterError("POST", "u", 502, "bad gateway"), down])
    shipper = MetricShipper(session, trial_id=1, retry_delay_s=0.01)
    shipper.report("training", 1, 1, {"loss": 1.0})
    shipper.close()
    assert _steps(session) == [1]


def test_a_refused_batch_is_raised_to_the_training_code():
    shipper = MetricShipper(RecordingSession(failures=[MasterError("POST", "u", 400, "bad group")]), trial_id=1)
    shipper.report("training", 1, 1, {"loss": 1.0})
    with pytest.raises(RuntimeError, match="bad group"):
        shipper.flush()
    shipper.close()


def test_close_gives_up_after_the_drain_timeout_and_says_so():
    session = RecordingSession(failures=[MasterError("POST", "u", 0, "down")] * 1000)
    shipper = MetricShipper(session, trial_id=1, drain_timeout_s=0.3, retry_delay_s=0.01)
    shipper.report("training", 1, 1, {"loss": 1.0})
    with pytest.raises(RuntimeError, match="1 metric reports were not delivered"):
        shipper.close()


def test_the_queue_is_bounded_and_blocks_instead_of_dropping():
    session = RecordingSession(delay_s=0.01)
    shipper = MetricShipper(session, trial_id=1, max_queued=5)
    for step in range(50):
        shipper.report("training", step, 1, {"loss": 1.0})
        assert shipper._queue.qsize() <= 5
    shipper.close()
    assert _steps(session) == list(range(50))
