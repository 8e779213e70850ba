"""Every combination of the hyperparameters' grid axes (`count` points per numeric range).

Points are computed by index when a trial is created, never all at once: a grid's size is
bounded at create (see ``sampling.grid_size``), and ``max_trials`` below it runs the first points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.config.grid_axes import grid_size
from controlplane.searchers.planned import PlannedSearcher
from controlplane.searchers.sampling import Grid

if TYPE_CHECKING:
    from controlplane.config.experiment import ExperimentConfig


def subset_warning(cfg: ExperimentConfig) -> str | None:
    """What a user should hear at create when ``max_trials`` cuts the grid short (None otherwise):
    the search is then not the grid they wrote."""
    max_trials = cfg.searcher.max_trials
    if cfg.searcher.name != "grid" or max_trials is None:
        return None
    size = grid_size(cfg.hyperparameters)
    if max_trials >= size:
        return None
    return (f"searcher.max_trials: {max_trials} is below the grid's {size} points: only the first {max_trials} "
            f"(in grid order) will be trained; raise max_trials to {size} to search the whole grid")


class GridSearcher(PlannedSearcher):
    def __init__(self, cfg: ExperimentConfig) -> None:
        super().__init__(cfg)
        self.grid = Grid(cfg.hyperparameters)
        self.count = len(self.grid)
        if cfg.searcher.max_trials is not None:
            self.count = min(self.count, cfg.searcher.max_trials)

    def total(self) -> int:
        return self.count

    def hparams(self, index: int) -> dict[str, Any]:
        return self.grid.point(index)
