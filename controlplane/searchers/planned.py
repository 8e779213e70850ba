"""The shape single, grid and random share: a known number of trials, a few at a time.

Creates up to ``max_concurrent_trials`` trials (0 means no limit), one more each time one
exits, until ``total`` exist; shuts down when every created trial has exited, with
``failure`` when none completed. Validation metrics do not change the plan. Progress is the
trials' training over ``total`` trials of the full length (``progress.py``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from controlplane.searchers.base import Action, Create, Searcher, rng_from_state, rng_state, shutdown_after
from controlplane.searchers.progress import TrialProgress, counted, length_in_batches

if TYPE_CHECKING:
    from controlplane.config.experiment import ExperimentConfig


class PlannedSearcher(Searcher):
    uses_trial_progress = True

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.reproducibility.experiment_seed)
        self.created = 0
        self.live: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.shut_down = False

    # subclasses
    def total(self) -> int:
        raise NotImplementedError

    def hparams(self, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def _limit(self) -> int:
        n = self.cfg.searcher.max_concurrent_trials
        return n if n > 0 else self.total()

    def _fill(self) -> list[Action]:
        actions: list[Action] = []
        while self.created < self.total() and len(self.live) < self._limit():
            hp = self.hparams(self.created)
            self.created += 1
            request_id = f"r{self.created}"
            self.live.append(request_id)
            actions.append(Create(request_id, hp, self.rng.randrange(2**32)))
        if not self.live and self.created >= self.total() and not self.shut_down:
            self.shut_down = True
            actions.append(shutdown_after(self.outcomes.values()))
        return actions

    def initial_actions(self) -> list[Action]:
        return self._fill()

    def on_validation(self, request_id: str, metric: float, steps_completed: int) -> list[Action]:
        return []

    def on_trial_exited(self, request_id: str, outcome: str) -> list[Action]:
        if request_id not in self.live:
            return []
        self.live.remove(request_id)
        self.outcomes[request_id] = outcome
        return self._fill()

    def reopen(self, request_ids: list[str]) -> list[Action]:
        """Determined's ContinueExperiment: these exited trials run again, and the search shuts down
        when they (and any it still had to create) have exited; the actions are what it does now."""
        for request_id in request_ids:
            self.outcomes.pop(request_id, None)
            if request_id not in self.live:
                self.live.append(request_id)
        self.shut_down = False
        return self._fill()

    def progress(self, trials: Mapping[str, TrialProgress] | None = None) -> float:
        """Each trial's fraction of the length (a completed one whole) summed over ``total()``
        trials: a trial that failed counts what it trained, not a whole trial."""
        basis = self.progress_basis()
        return counted(basis["total"], basis["length"], basis["completed"], basis["counting"], trials)

    def progress_basis(self) -> dict[str, Any]:
        """Its trials completed and those whose training counts (the others it created), in order."""
        done = [r for r, outcome in self.outcomes.items() if outcome == "completed"]
        counting = [r for r in [*self.outcomes, *self.live] if self.outcomes.get(r) != "completed"]
        return {"total": self.total(), "length": length_in_batches(self.cfg.searcher), "completed": len(done),
                "counting": counting}

    def snapshot(self) -> dict[str, Any]:
        return {"created": self.created, "live": list(self.live), "outcomes": dict(self.outcomes),
                "shut_down": self.shut_down, "rng": rng_state(self.rng)}

    @classmethod
    def restore(cls, cfg: ExperimentConfig, snap: dict[str, Any]) -> PlannedSearcher:
        s = cls(cfg)
        s.created = snap["created"]
        s.live = list(snap["live"])
        s.outcomes = dict(snap["outcomes"])
        s.shut_down = snap["shut_down"]
        s.rng = rng_from_state(snap["rng"])
        return s
