"""`max_trials` independent samples, drawn from the experiment seed's generator."""

from __future__ import annotations

from typing import Any

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import sample


class RandomSearcher(PlannedSearcher):
    def total(self) -> int:
        return self.cfg.searcher.max_trials or 1

    def hparams(self, index: int) -> dict[str, Any]:
        return sample(self.cfg.hyperparameters, self.rng)
