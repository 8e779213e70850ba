"""Every combination of the hyperparameters' grid axes (`count` points per numeric range).

Points are computed by index when a trial is created, never all at once: a grid's size is
bounded at create (see ``sampling.grid_size``), and ``max_trials`` below it runs the first points.
"""

from __future__ import annotations

from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import Grid


class GridSearcher(PlannedSearcher):
    def __init__(self, cfg) -> None:  # noqa: ANN001
        super().__init__(cfg)
        self.grid = Grid(cfg.hyperparameters)
        self.count = len(self.grid)
        if cfg.searcher.max_trials is not None:
            self.count = min(self.count, cfg.searcher.max_trials)

    def total(self) -> int:
        return self.count

    def hparams(self, index: int) -> dict:
        return self.grid.point(index)
