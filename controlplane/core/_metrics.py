"""Ships metric reports from ONE background thread, in batches, so training never waits on HTTP.

Each report is serialized in the caller's thread (a value JSON cannot carry fails right at the
``report_*`` call, not later in the thread). Reports queue up (bounded: a full queue makes the
reporter wait rather than grow memory or drop data) and the thread posts whatever has
accumulated as one ``metrics/batch`` call. A transient failure (master down, 5xx) retries the
same batch until it is acknowledged; a 4xx means the data is bad and is raised to the training
code at its next call. ``flush()`` returns once everything queued before it is acknowledged.
"""

from __future__ import annotations

import atexit
import json
import logging
import numbers
import queue
import threading
from datetime import UTC, datetime
from typing import Any

from controlplane.common.floats import encode_nonfinite
from controlplane.core._session import MasterError, Session

log = logging.getLogger("controlplane.core")

MAX_QUEUED = 10_000
MAX_BATCH = 1_000
DRAIN_TIMEOUT_S = 600.0


def plain(value: Any) -> Any:
    """numpy/torch scalars and other numbers → int/float; containers recursively; non-finite → strings."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return encode_nonfinite(float(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)  # 0-d tensors / arrays
    if callable(item):
        try:
            return plain(item())
        except (TypeError, ValueError):
            pass
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) or (isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"))


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


class MetricShipper:
    def __init__(self, session: Session, trial_id: int, *, max_queued: int = MAX_QUEUED,
                 drain_timeout_s: float = DRAIN_TIMEOUT_S, retry_delay_s: float = 0.5) -> None:
        self._session = session
        self._path = f"/api/v1/trials/{trial_id}/metrics/batch"
        self._queue: queue.Queue[str | None] = queue.Queue(max_queued)
        self._drain_timeout_s = drain_timeout_s
        self._retry_delay_s = retry_delay_s
        self._error: Exception | None = None
        self._abandon = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="metric-shipper", daemon=True)
        self._thread.start()
        atexit.register(self._close_at_exit)

    def report(self, group: str, steps_completed: int, trial_run_id: int, metrics: dict[str, Any],
               batch_metrics: list[Any] | None = None) -> None:
        self.raise_if_failed()
        if self._closed:
            raise RuntimeError("the core context is closed: no more metrics can be reported")
        record = {
            "group": group, "stepsCompleted": steps_completed, "trialRunId": trial_run_id, "reportTime": utc_now(),
            "metrics": {"avgMetrics": plain(metrics),
                        "batchMetrics": plain(batch_metrics) if batch_metrics is not None else None},
        }
        try:
            line = json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{group} metrics at step {steps_completed} cannot be sent as JSON: {e}") from e
        self._queue.put(line)

    def flush(self) -> None:
        """Blocks until every report queued so far is acknowledged (or refused) by the master."""
        self._queue.join()
        self.raise_if_failed()

    def close(self) -> None:
        """Flushes and stops the thread; waits up to drain_timeout_s for an unreachable master."""
        if self._closed:
            self.raise_if_failed()
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        try:
            self._queue.put(None, timeout=self._drain_timeout_s)
        except queue.Full:
            pass
        self._thread.join(self._drain_timeout_s)
        if self._thread.is_alive():
            self._abandon.set()
            self._thread.join(5.0)
        if not self._thread.is_alive():
            self._session.close()
        self.raise_if_failed()

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except Exception as e:  # noqa: BLE001 - at exit there is nobody left to raise to
            log.error("%s", e)

    def raise_if_failed(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"metrics were not accepted by the master: {error}") from error

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            lines: list[str] = []
            taken = 1
            if first is None:
                stop = True
            else:
                lines.append(first)
            while not stop and len(lines) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                taken += 1
                if item is None:
                    stop = True
                else:
                    lines.append(item)
            try:
                if lines:
                    self._send(lines)
            finally:
                for _ in range(taken):
                    self._queue.task_done()

    def _send(self, lines: list[str]) -> None:
        body = '{"reports":[' + ",".join(lines) + "]}"
        delay = self._retry_delay_s
        while True:
            try:
                self._session.post(self._path, data=body, retry=False)
                return
            except MasterError as e:
                if not e.transient:  # the data is bad: retrying cannot help
                    log.error("%s", e)
                    self._error = e
                    return
                if self._abandon.is_set():
                    self._error = RuntimeError(f"{len(lines)} metric reports were not delivered: {e}")
                    log.error("%s", self._error)
                    return
                log.warning("%s; retrying the batch of %d reports in %.0fs", e, len(lines), delay)
                self._abandon.wait(delay)
                delay = min(delay * 2, 30.0)
            except Exception as e:  # keep the thread alive, surface the error
                log.exception("shipping metrics failed")
                self._error = e
                return

