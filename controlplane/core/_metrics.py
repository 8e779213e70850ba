"""Ships metric reports from a background thread, in batches, so training never waits on HTTP.

Reports queue up (bounded: a full queue makes the reporter wait rather than drop data) and
one thread posts whatever has accumulated in one `metrics/batch` call. ``flush()`` returns
once everything queued before it is acknowledged by the master.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from datetime import datetime, timezone

from controlplane.common.floats import encode_nonfinite
from controlplane.core._session import MasterError, Session

log = logging.getLogger("controlplane.core")

MAX_QUEUED = 10_000
MAX_BATCH = 1_000


class MetricShipper:
    def __init__(self, session: Session, trial_id: int) -> None:
        self._session = session
        self._path = f"/api/v1/trials/{trial_id}/metrics/batch"
        self._queue: queue.Queue[dict | None] = queue.Queue(MAX_QUEUED)
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="metric-shipper", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def report(self, group: str, steps_completed: int, trial_run_id: int, metrics: dict,
               batch_metrics: list | None = None) -> None:
        self.raise_if_failed()
        self._queue.put({
            "group": group, "stepsCompleted": steps_completed, "trialRunId": trial_run_id,
            "reportTime": datetime.now(timezone.utc).isoformat(),
            "metrics": {"avgMetrics": encode_nonfinite(metrics),
                        "batchMetrics": encode_nonfinite(batch_metrics) if batch_metrics is not None else None},
        })

    def flush(self) -> None:
        self._queue.join()
        self.raise_if_failed()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"metrics were refused by the master: {error}") from error

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            batch, taken = [], 1
            if first is None:
                stop = True
            else:
                batch.append(first)
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                taken += 1
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            try:
                if batch:
                    self._session.post(self._path, json={"reports": batch})
            except MasterError as e:  # a 4xx: the data is bad, retrying cannot help
                log.error("%s", e)
                self._error = e
            except Exception as e:  # noqa: BLE001 - keep the thread alive, surface the error
                log.exception("shipping metrics failed")
                self._error = e
            finally:
                for _ in range(taken):
                    self._queue.task_done()
