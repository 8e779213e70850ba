"""Shared by the searcher tests: a small experiment config and a driver that runs a search to its end."""

from __future__ import annotations

from typing import Any

from controlplane.config.experiment import ExperimentConfig, parse_experiment_config
from controlplane.searchers import Create, Searcher, Shutdown

HPARAMS: dict[str, Any] = {
    "lr": {"type": "log", "minval": -3, "maxval": -1, "count": 3},
    "units": {"type": "int", "minval": 8, "maxval": 64, "count": 2},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "opt": {"momentum": 0.9, "beta": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 1}},
}


def config(name: str, seed: int = 1, hparams: dict | None = None, **searcher: Any) -> ExperimentConfig:
    return parse_experiment_config({
        "entrypoint": "python3 train.py",
        "hyperparameters": HPARAMS if hparams is None else hparams,
        "searcher": {"name": name, "metric": "loss", "max_length": 5, **searcher},
        "reproducibility": {"experiment_seed": seed},
    })


def run_to_end(searcher: Searcher, pending: list | None = None,
               outcome: str = "completed") -> tuple[list[Create], list[Shutdown]]:
    """Exits every trial the searcher creates with `outcome`, in creation order; returns creates and shutdowns."""
    created: list[Create] = []
    shutdowns: list[Shutdown] = []
    queue = list(searcher.initial_actions() if pending is None else pending)
    while queue:
        action = queue.pop(0)
        if isinstance(action, Create):
            created.append(action)
            queue.extend(searcher.on_trial_exited(action.request_id, outcome))
        elif isinstance(action, Shutdown):
            shutdowns.append(action)
    return created, shutdowns


def signature(creates: list[Create]) -> list[tuple]:
    return [(c.request_id, c.hparams, c.seed) for c in creates]
