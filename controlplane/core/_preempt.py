"""ctx.preempt: the master's preemption signal, long-polled in the background.

``should_preempt()`` is a cheap read of the latest answer; the first True is acknowledged
to the master (as Determined's auto-ack does), which turns the exit that follows into
"preempted, resume later" rather than "done".
"""

from __future__ import annotations

import logging
import threading

from controlplane.core._session import MasterError, Session

log = logging.getLogger("controlplane.core")
POLL_S = 60


class PreemptContext:
    def __init__(self, session: Session | None, allocation_id: str | None) -> None:
        self._session = session
        self._path = f"/api/v1/allocations/{allocation_id}/signals" if allocation_id else ""
        self._preempt = False
        self._acked = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if session is not None and allocation_id:
            self._preempt = self._poll(0)
            self._thread = threading.Thread(target=self._run, name="preemption-watcher", daemon=True)
            self._thread.start()

    def _poll(self, timeout_s: int) -> bool:
        r = self._session.get(f"{self._path}/preemption", params={"timeout_seconds": timeout_s},
                              timeout=timeout_s + 10)
        return r.json()["preempt"] is True

    def _run(self) -> None:
        while not self._stop.is_set() and not self._preempt:
            try:
                self._preempt = self._poll(POLL_S)
            except MasterError as e:
                log.warning("preemption long-poll: %s", e)
                self._stop.wait(1.0)

    def should_preempt(self) -> bool:
        if self._preempt and not self._acked and self._session is not None:
            self._session.post(f"{self._path}/ack_preemption")
            self._acked = True
        return self._preempt

    def close(self) -> None:
        self._stop.set()
