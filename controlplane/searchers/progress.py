"""What the master tells a searcher about its trials' training, for the experiment's progress.

A searcher's progress is its completed units over its total (Determined's ``Progress``): the
planned searchers (single, random, grid) count each trial's fraction of the searcher's length,
its batches over ``max_length`` when that is in batches, else the fraction it reported itself
(``report_progress``), whichever is further; a trial that completed counts whole. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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
