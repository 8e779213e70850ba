"""The searcher contract: events in, actions out; no I/O, no clock, state as a JSON snapshot.

The master feeds a searcher the trial events it needs (a validation metric, a trial's exit)
and applies the actions it returns: create a trial, stop one, shut the search down.
A searcher is rebuilt from ``snapshot()`` after every event, so the master can restart at any
point and go on exactly where it was.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controlplane.config.experiment import ExperimentConfig
    from controlplane.searchers.progress import TrialProgress


@dataclass(frozen=True)
class Create:
    request_id: str
    hparams: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class Stop:
    request_id: str


@dataclass(frozen=True)
class Shutdown:
    failure: bool = False
    cancel: bool = False  # every trial was canceled by a user: the experiment ends CANCELED, not ERROR


def shutdown_after(outcomes: Iterable[str]) -> Shutdown:
    """The end of a search whose trials have all exited. As Determined's searcher.go: a user's
    cancel (``det trial kill``) is no failure, so a search whose every trial was canceled is
    canceled; otherwise it failed when no trial completed."""
    ended = list(outcomes)
    if ended and all(outcome == "canceled" for outcome in ended):
        return Shutdown(cancel=True)
    return Shutdown(failure="completed" not in ended)


Action = Create | Stop | Shutdown
OUTCOMES = ("completed", "errored", "canceled")


class Searcher(ABC):
    uses_trial_progress = False  # whether progress() reads the trials' training (else it ignores it)

    @abstractmethod
    def initial_actions(self) -> list[Action]: ...

    @abstractmethod
    def on_validation(self, request_id: str, metric: float, steps_completed: int) -> list[Action]:
        """``steps_completed``: the validation's time step (batches, or an ASHA searcher's time metric)."""

    @abstractmethod
    def on_trial_exited(self, request_id: str, outcome: str) -> list[Action]: ...

    @abstractmethod
    def progress(self, trials: Mapping[str, TrialProgress] | None = None) -> float:
        """0..1, the searcher's completed units over its total. ``trials``: what each trial (by
        request id) has trained, for searchers that count it; a searcher never reaches 1 by
        failing, so an experiment that ends in ERROR keeps the progress it reached."""

    def progress_basis(self) -> dict[str, Any]:
        """What ``progress`` is computed from, as JSON (``progress.from_basis``): by default the
        value its own state fixes; searchers that count their trials' training say what to count."""
        return {"value": self.progress()}

    @abstractmethod
    def snapshot(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def restore(cls, cfg: ExperimentConfig, snap: dict[str, Any]) -> Searcher: ...


def rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_state(state: list[Any]) -> random.Random:
    rng = random.Random()
    rng.setstate((state[0], tuple(state[1]), state[2]))
    return rng
