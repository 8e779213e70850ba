"""ctx.searcher: the length to train, as Determined 0.38 computes it, from the experiment config.

There is one operation per trial; its length is ``searcher.max_length``. Reporting progress
goes to the master; ``report_completed`` is recorded locally (the master takes the searcher
metric from the validation metrics, as Determined does).
"""

from __future__ import annotations

from collections.abc import Iterator

from controlplane.core._session import Session


class SearcherOperation:
    def __init__(self, length: int, session: Session | None, trial_id: int | None) -> None:
        self.length = length
        self._session = session
        self._trial_id = trial_id
        self.completed_metric: float | None = None
        self._completed = False

    def report_progress(self, length: float) -> None:
        if self._session is None or self._trial_id is None:
            return
        progress = min(1.0, max(0.0, float(length) / self.length)) if self.length else 1.0
        self._session.post(f"/api/v1/trials/{self._trial_id}/progress", json={"progress": progress, "is_raw": True})

    def report_completed(self, searcher_metric: float | None) -> None:
        self.completed_metric = searcher_metric
        self._completed = True


def max_length(config: dict) -> int:
    raw = (config.get("searcher") or {}).get("max_length")
    if isinstance(raw, dict) and raw:
        return int(next(iter(raw.values())))
    if isinstance(raw, int):
        return raw
    raise RuntimeError("searcher.max_length is not set in the experiment config, so there is no searcher "
                       "operation to train for")


class SearcherContext:
    def __init__(self, length: int | None, session: Session | None, trial_id: int | None) -> None:
        self._length = length
        self._session = session
        self._trial_id = trial_id

    def operations(self) -> Iterator[SearcherOperation]:
        if self._length is None:
            raise RuntimeError("off the cluster there is no searcher: pass core.init(max_length=N) to train N steps")
        op = SearcherOperation(self._length, self._session, self._trial_id)
        yield op
        if not op._completed:
            raise RuntimeError("the searcher operation ended without op.report_completed(metric)")
