"""Every searcher by its config name: the one table that imports them all (none of them imports it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from controlplane.searchers.adaptive_asha import AdaptiveAshaSearcher
from controlplane.searchers.asha import AshaSearcher
from controlplane.searchers.base import Searcher
from controlplane.searchers.grid import GridSearcher
from controlplane.searchers.random import RandomSearcher
from controlplane.searchers.single import SingleSearcher

if TYPE_CHECKING:
    from controlplane.config.experiment import ExperimentConfig

SEARCHERS: dict[str, Callable[[ExperimentConfig], Searcher]] = {
    "single": SingleSearcher, "grid": GridSearcher, "random": RandomSearcher,
    "adaptive_asha": AdaptiveAshaSearcher, "async_halving": AshaSearcher,
}

# Searchers whose plan never depends on metrics: the master need not wake them per validation.
METRIC_BLIND = {"single", "grid", "random"}


def uses_validations(name: str) -> bool:
    return name not in METRIC_BLIND


def make_searcher(cfg: ExperimentConfig) -> Searcher:
    return SEARCHERS[cfg.searcher.name](cfg)
