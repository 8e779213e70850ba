"""ctx.searcher: the length to train, fabricated client-side as Determined 0.38 does (§4.5).

There is one operation per trial; its length is ``searcher.max_length`` of the experiment
config. ``report_progress`` posts the fraction done; ``report_completed`` sends nothing (the
master takes the searcher metric from the validation metrics) but is recorded, and leaving
the loop without it is an error, as in Determined.

With several workers every one iterates ``operations()`` in step: the chief fabricates the op and
broadcasts its length; only the chief may report progress or completion.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from controlplane.core._session import Session

if TYPE_CHECKING:
    from controlplane.core._distributed import DistributedContext


class SearcherOperation:
    def __init__(self, length: int, session: Session | None, trial_id: int | None, unit: str = "batches",
                 is_chief: bool = True) -> None:
        self.length = length
        self.unit = unit
        self._session = session
        self._trial_id = trial_id
        self._is_chief = is_chief
        self.completed_metric: float | None = None
        self._completed = False

    def report_progress(self, length: float) -> None:
        """``length`` units done of ``self.length``: POST progress {"progress": min(1, x/len), "isRaw": true}."""
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_progress() from the chief worker")
        if self._completed:
            raise RuntimeError("you must not call op.report_progress() after op.report_completed()")
        if self._session is None or self._trial_id is None:
            return
        progress = min(1.0, max(0.0, float(length) / self.length)) if self.length else 1.0
        self._session.post(f"/api/v1/trials/{self._trial_id}/progress", json={"progress": progress, "isRaw": True})

    def report_completed(self, searcher_metric: float | None) -> None:
        if not self._is_chief:
            raise RuntimeError("you must only call op.report_completed() from the chief worker")
        if self._completed:
            raise RuntimeError("you may only call op.report_completed() once")
        self.completed_metric = searcher_metric
        self._completed = True


def max_length(config: dict[str, Any]) -> tuple[int, str] | None:
    """``searcher.max_length`` as (length, unit): an int, or the single value of ``{unit: n}``."""
    searcher = config.get("searcher") or {}
    raw = searcher.get("max_length")
    if isinstance(raw, dict) and raw:
        unit, value = next(iter(raw.items()))
        return int(value), str(unit)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw, str(searcher.get("unit") or "batches")
    return None


class SearcherContext:
    def __init__(self, length: int | None, session: Session | None, trial_id: int | None, *,
                 unit: str = "batches", missing_reason: str = "", dist: DistributedContext | None = None) -> None:
        self._length = length
        self._unit = unit
        self._session = session
        self._trial_id = trial_id
        self._missing_reason = missing_reason or "no searcher length is known"
        self._dist = dist

    def operations(self, searcher_mode: object = None, auto_ack: bool = True) -> Iterator[SearcherOperation]:
        if self._length is None:
            raise RuntimeError(self._missing_reason)
        dist = self._dist
        if dist is None or dist.size < 2:
            op = SearcherOperation(self._length, self._session, self._trial_id, self._unit)
            yield op
            if not op._completed:
                raise RuntimeError("the searcher operation ended without op.report_completed(metric)")
            return
        if dist.rank == 0:
            op = SearcherOperation(self._length, self._session, self._trial_id, self._unit)
            dist.broadcast(op.length)
            yield op
            if not op._completed:
                raise RuntimeError("the searcher operation ended without op.report_completed(metric)")
            dist.broadcast(None)
            return
        while True:  # workers follow the chief's operations
            length = dist.broadcast(None)
            if length is None:
                return
            yield SearcherOperation(length, self._session, self._trial_id, self._unit, is_chief=False)
