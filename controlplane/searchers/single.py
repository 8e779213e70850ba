"""One trial, every hyperparameter at its center (const values as given)."""

from __future__ import annotations

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import center


class SingleSearcher(PlannedSearcher):
    def total(self) -> int:
        return 1

    def hparams(self, index: int) -> dict:
        return center(self.cfg.hyperparameters)
