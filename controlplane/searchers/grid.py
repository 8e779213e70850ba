"""Every combination of the hyperparameters' grid axes (`count` points per numeric range)."""

from __future__ import annotations

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import grid


class GridSearcher(PlannedSearcher):
    def __init__(self, cfg) -> None:  # noqa: ANN001
        super().__init__(cfg)
        self.points = grid(cfg.hyperparameters)
        if cfg.searcher.max_trials is not None:
            self.points = self.points[: cfg.searcher.max_trials]

    def total(self) -> int:
        return len(self.points)

    def hparams(self, index: int) -> dict:
        return self.points[index]
