"""One trial, every hyperparameter at its center (const values as given)."""

from __future__ import annotations

from typing import Any

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import center


class SingleSearcher(PlannedSearcher):
    def total(self) -> int:
        return 1

    def hparams(self, index: int) -> dict[str, Any]:
        return center(self.cfg.hyperparameters)
