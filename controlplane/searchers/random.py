"""`max_trials` independent samples, drawn from the experiment seed's generator."""

from __future__ import annotations

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import sample


class RandomSearcher(PlannedSearcher):
    def total(self) -> int:
        return self.cfg.searcher.max_trials or 1

    def hparams(self, index: int) -> dict:
        return sample(self.cfg.hyperparameters, self.rng)
