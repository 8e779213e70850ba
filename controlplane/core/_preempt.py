"""ctx.preempt (mirrors determined.core.PreemptContext): the master's preemption signal.

A daemon thread long-polls ``GET /api/v1/allocations/{id}/signals/preemption`` (first with
``timeout_seconds=0`` at start, then 60 s polls under a 70 s HTTP timeout), so
``should_preempt()`` is a cheap read of the latest answer. The first True it returns is
acknowledged (``POST .../signals/ack_preemption``, no body) as Determined's auto-ack does, which
turns the exit that follows into "preempted, resume later" rather than "done".

With several workers (``PreemptMode.WorkersAskChief``, the default) only the chief polls; every
worker calls ``should_preempt()`` in step and gets the chief's answer by broadcast, so all of them
stop at the same batch. ``ChiefOnly``: only the chief may call it. ``WorkersAskMaster``: each
worker polls the master itself.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import TYPE_CHECKING

from controlplane.core._session import MasterError, Session

if TYPE_CHECKING:
    from controlplane.core._distributed import DistributedContext

log = logging.getLogger("controlplane.core")
POLL_S = 60
HTTP_SLACK_S = 10
MIN_INTERVAL_S = 1.0  # a master that answers at once (allocation gone) must not make us spin


class PreemptMode(enum.Enum):
    """Who asks the master, and who may call ``should_preempt()`` (see the module docstring)."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    def __init__(self, session: Session | None, allocation_id: str | None, dist: DistributedContext | None = None,
                 preempt_mode: PreemptMode = PreemptMode.WorkersAskChief) -> None:
        self._session = session
        self._path = f"/api/v1/allocations/{allocation_id}/signals"
        self._dist = dist
        self._mode = PreemptMode(preempt_mode)
        self._rank = dist.rank if dist is not None else 0
        self._size = dist.size if dist is not None else 1
        self._asks_master = self._rank == 0 or self._mode == PreemptMode.WorkersAskMaster
        self._preempt = False
        self._acked = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if session is not None and allocation_id and self._asks_master:
            self._preempt = self._poll(session, 0)
            self._thread = threading.Thread(target=self._run, args=(session.clone(),), name="preemption-watcher",
                                            daemon=True)
            self._thread.start()

    def _poll(self, session: Session, timeout_s: int) -> bool:
        r = session.get(f"{self._path}/preemption", params={"timeout_seconds": timeout_s},
                        timeout=timeout_s + HTTP_SLACK_S)
        return r.json()["preempt"] is True

    def _run(self, session: Session) -> None:
        try:
            while not self._stop.is_set() and not self._preempt:
                started = time.monotonic()
                try:
                    self._preempt = self._poll(session, POLL_S)
                except (MasterError, KeyError, ValueError) as e:
                    log.warning("preemption long-poll: %s", e)
                    self._stop.wait(5.0)
                    continue
                if time.monotonic() - started < MIN_INTERVAL_S:
                    self._stop.wait(MIN_INTERVAL_S)
        finally:
            session.close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """The latest answer of the master; True stays True. Under ``WorkersAskChief`` every worker
        must call this in step (it is a broadcast from the chief)."""
        if not self._asks_master:
            if self._mode == PreemptMode.ChiefOnly:
                raise RuntimeError("PreemptContext was configured with preempt_mode=ChiefOnly but "
                                   f".should_preempt() was called from non-chief worker of rank={self._rank}")
            assert self._dist is not None
            return bool(self._dist.broadcast(None))
        out = self._preempt
        if out and auto_ack and not self._acked:
            self.acknowledge_preemption_signal()
        if self._mode == PreemptMode.WorkersAskChief and self._dist is not None and self._size > 1:
            self._dist.broadcast(out)
        return out

    def acknowledge_preemption_signal(self) -> None:
        if self._acked or self._session is None or not self._asks_master:
            return
        self._session.post(f"{self._path}/ack_preemption")
        self._acked = True

    def close(self) -> None:
        """Stops polling; the daemon thread ends after its current poll (never blocks exit)."""
        self._stop.set()
