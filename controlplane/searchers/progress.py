"""What the master tells a searcher about its trials' training, for the experiment's progress.

A searcher's progress is its completed units over its total (Determined's ``Progress``): the
planned searchers (single, random, grid) count each trial's fraction of the searcher's length,
its batches over ``max_length`` when that is in batches, else the fraction it reported itself
(``report_progress``), whichever is further; a trial that completed counts whole. Pure: no I/O.

A searcher's ``progress_basis()`` is what its progress is computed from, as plain JSON the master
stores with each snapshot (``experiments.progress_basis``), so a listing computes every row's
progress from it and the trials' rows without rebuilding the searcher: ``{"value": v}`` for a
searcher whose progress its own state fixes (ASHA), else ``{"total", "length", "completed",
"counting"}`` (the planned searchers: trials completed, and the request ids whose fraction counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controlplane.config.experiment import SearcherConfig


@dataclass(frozen=True)
class TrialProgress:
    batches: int = 0  # the highest steps_completed it reported
    reported: float = 0.0  # its own report_progress, 0..1

    def fraction(self, length_batches: int | None) -> float:
        """How much of the searcher's length it has trained, 0..1."""
        by_batches = self.batches / length_batches if length_batches else 0.0
        return min(max(self.reported, by_batches, 0.0), 1.0)


def length_in_batches(searcher: SearcherConfig) -> int | None:
    """The searcher's length when it is counted in batches (None for epochs, records, a time
    metric, or no length: then only the trials' own reports tell)."""
    length = searcher.length()
    if length is None or length[1] != "batches" or length[0] <= 0:
        return None
    return length[0]


def counted(total: int, length: int | None, completed: int, counting: list[str],
            trials: Mapping[str, TrialProgress] | None) -> float:
    """``completed`` whole trials plus each of ``counting``'s fraction of ``length``, over ``total``
    trials (none: 1). The one formula of the planned searchers and of their stored basis."""
    if not total:
        return 1.0
    trials = trials or {}
    none = TrialProgress()
    done = completed + sum(trials.get(r, none).fraction(length) for r in counting)
    return min(done / total, 1.0)


def from_basis(basis: Mapping[str, Any], trials: Mapping[str, TrialProgress] | None) -> float:
    """The progress a stored ``progress_basis()`` gives with the trials' training."""
    if "value" in basis:
        return float(basis["value"])
    return counted(int(basis["total"]), basis.get("length"), int(basis["completed"]), list(basis["counting"]), trials)


def basis_counts_trials(basis: Mapping[str, Any]) -> list[str]:
    """The request ids whose training the basis needs (none for a fixed value)."""
    return [] if "value" in basis else list(basis.get("counting") or [])
