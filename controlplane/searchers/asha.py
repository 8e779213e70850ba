"""Asynchronous successive halving that stops trials early, as Determined >= 0.36 does it.

``async_halving`` is one bracket; ``adaptive_asha`` runs several brackets side by side (see
``adaptive_asha.py``) and routes each trial's events to the bracket that created it.

Trials are created with the full length. A bracket of ``n`` rungs has rung lengths
``max_length / divisor**(n-1-i)`` (at least 1). When a trial reports a validation whose time step
reaches its next rung, its metric is inserted in that rung's sorted list; it goes on if it ranks
within the top ``max(len(rung) // divisor, 1)``, else it gets a ``Stop``. Reaching the top rung is
always a ``Stop`` (it has trained the full length). A ``Stop`` comes with a ``Create`` while the
bracket has created fewer than its ``max_trials``, so each bracket keeps its
``max_concurrent_trials`` trials training. A trial that exits without having been stopped
(errored, killed) counts as the worst metric in the rung it was working towards and is replaced.
The search shuts down when every trial it created has exited.

Determined's ``master/pkg/searcher/asha_stopping.go`` is the reference; where this module differs it
says so: validations of a trial already stopped are ignored (Determined would stop and replace it
again), and a trial that exits 0 without being stopped is replaced too (Determined would run fewer
than ``max_trials`` trials).
"""

from __future__ import annotations

import bisect
import math
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.config.stored import searcher_from
from controlplane.searchers.base import Action, Create, Searcher, Stop, rng_from_state, rng_state, shutdown_after
from controlplane.searchers.sampling import sample

if TYPE_CHECKING:
    from controlplane.config.experiment import ExperimentConfig, SearcherConfig
    from controlplane.searchers.progress import TrialProgress

# The metric an exited trial is ranked with (Determined's ashaExitedMetricValue): worse than any.
EXITED = sys.float_info.max


def power(base: float, exponent: int) -> float:
    """``base ** exponent``, infinite instead of OverflowError."""
    try:
        return float(base) ** exponent
    except OverflowError:
        return math.inf


def rung_lengths(num_rungs: int, divisor: float, max_length: int) -> list[int]:
    """Units each rung needs: ``max_length`` divided by ``divisor`` once per rung above it, at least 1."""
    out = []
    for i in range(num_rungs):
        rate = power(divisor, num_rungs - i - 1)
        out.append(max(int(max_length / rate), 1))
    return out


def initial_trials(num_rungs: int, divisor: float, max_trials: int, max_concurrent_trials: int) -> int:
    """How many trials a bracket starts with; each stop then replaces one (Determined's initialTrials)."""
    if max_concurrent_trials > 0:
        return min(max_concurrent_trials, max_trials)
    return int(min(max(1.0, power(divisor, num_rungs - 1)), float(max_trials)))


def time_unit(searcher: dict[str, Any]) -> str:
    """The validation metric an ASHA rung is measured in (``SearcherView.time_unit``)."""
    return searcher_from(searcher).time_unit


def time_step(unit: str, metrics: dict[str, Any], steps_completed: int) -> int | None:
    """A validation's time step in ``unit``: the metric of that name, truncated to an integer
    (Determined reads it from the validation metrics), or ``steps_completed`` for batches when the
    trial did not report one. None when it cannot be known: the validation then decides nothing."""
    value = metrics.get(unit)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return int(value)
    if unit == "batches":
        return steps_completed
    return None


def ranked(metric: float, smaller_is_better: bool) -> float:
    """The value a rung sorts by, smaller first; NaN is the worst; kept finite for JSON snapshots."""
    if math.isnan(metric):
        return EXITED
    value = metric if smaller_is_better else -metric
    return max(min(value, EXITED), -EXITED)


@dataclass
class Rung:
    units_needed: int
    metrics: list[tuple[float, str]] = field(default_factory=list)  # (ranked value, request id), sorted

    def insert(self, request_id: str, value: float) -> int:
        """Inserts before equal values (Go's sort.Search for the first >=) and returns the index."""
        index = bisect.bisect_left([m for m, _ in self.metrics], value)
        self.metrics.insert(index, (value, request_id))
        return index


@dataclass
class Bracket:
    num_rungs: int
    max_trials: int
    max_concurrent_trials: int
    divisor: float
    rungs: list[Rung]
    trial_rungs: dict[str, int] = field(default_factory=dict)  # the rung each trial works towards
    created: int = 0
    exited: int = 0

    @classmethod
    def new(cls, num_rungs: int, max_trials: int, max_concurrent_trials: int, divisor: float,
            max_length: int) -> Bracket:
        rungs = [Rung(n) for n in rung_lengths(num_rungs, divisor, max_length)]
        return cls(num_rungs, max_trials, max_concurrent_trials, divisor, rungs)

    def initial(self) -> int:
        return initial_trials(self.num_rungs, self.divisor, self.max_trials, self.max_concurrent_trials)

    def validation(self, request_id: str, step: int, value: float) -> bool:
        """Records the validation in every rung it reaches; True when the trial is to stop."""
        for r in range(self.trial_rungs.get(request_id, 0), self.num_rungs):
            rung = self.rungs[r]
            self.trial_rungs[request_id] = r
            if step < rung.units_needed:
                return False
            index = rung.insert(request_id, value)
            if r == self.num_rungs - 1:
                return True  # the top rung: the full length is trained
            keep = max(int(len(rung.metrics) / self.divisor), 1)
            if index >= keep:
                return True
        return False

    def exited_early(self, request_id: str) -> None:
        self.rungs[self.trial_rungs.get(request_id, 0)].insert(request_id, EXITED)

    def progress(self, failed: bool = False) -> float:
        # Determined's: trials in the first rung against 120% of max_trials, or the exited share
        # once every trial has reached it. For a search that failed (no trial completed), only
        # trials that reached the first rung with a metric count: exits are not progress then.
        if failed:
            reached = sum(1 for value, _ in self.rungs[0].metrics if value != EXITED)
            return min(reached / (1.2 * self.max_trials), 1.0)
        seen = len(self.rungs[0].metrics)
        done = seen / (1.2 * self.max_trials)
        if seen >= self.max_trials:
            done = max(self.exited / self.max_trials, done)
        return min(done, 1.0)

    def snapshot(self) -> dict[str, Any]:
        return {"rungs": [[[v, rid] for v, rid in rung.metrics] for rung in self.rungs],
                "trial_rungs": dict(self.trial_rungs), "created": self.created, "exited": self.exited}

    def restore(self, snap: dict[str, Any]) -> None:
        for rung, metrics in zip(self.rungs, snap["rungs"], strict=True):
            rung.metrics = [(float(v), str(rid)) for v, rid in metrics]
        self.trial_rungs = {str(k): int(v) for k, v in snap["trial_rungs"].items()}
        self.created = int(snap["created"])
        self.exited = int(snap["exited"])


def searcher_length(s: SearcherConfig) -> int:
    length = s.length()
    if length is None:  # the config schema requires one: reaching here is a bug
        raise ValueError(f"the {s.name} searcher needs max_time and time_metric (or max_length)")
    return length[0]


class AshaSearcher(Searcher):
    """Brackets of asynchronous successive halving with early stopping; ``brackets()`` says which."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg
        self.smaller_is_better = cfg.searcher.smaller_is_better
        self.rng = random.Random(cfg.reproducibility.experiment_seed)
        self.brackets = self.make_brackets(cfg.searcher)
        self.created = 0
        self.trial_bracket: dict[str, int] = {}
        self.live: list[str] = []
        self.stopped: list[str] = []  # live trials told to stop, winding down
        self.outcomes: dict[str, str] = {}
        self.shut_down = False

    @classmethod
    def make_brackets(cls, s: SearcherConfig) -> list[Bracket]:
        """async_halving: one bracket of ``num_rungs`` rungs."""
        assert s.num_rungs is not None and s.max_trials is not None
        return [Bracket.new(s.num_rungs, s.max_trials, s.max_concurrent_trials, s.divisor, searcher_length(s))]

    def _create(self, bracket_index: int) -> Create:
        hp = sample(self.cfg.hyperparameters, self.rng)
        self.created += 1
        request_id = f"r{self.created}"
        bracket = self.brackets[bracket_index]
        bracket.created += 1
        bracket.trial_rungs[request_id] = 0
        self.trial_bracket[request_id] = bracket_index
        self.live.append(request_id)
        return Create(request_id, hp, self.rng.randrange(2**32))

    def _replace(self, bracket_index: int) -> list[Action]:
        bracket = self.brackets[bracket_index]
        return [self._create(bracket_index)] if bracket.created < bracket.max_trials else []

    def initial_actions(self) -> list[Action]:
        actions: list[Action] = []
        for i, bracket in enumerate(self.brackets):
            for _ in range(bracket.initial()):
                actions.append(self._create(i))
        return actions

    def on_validation(self, request_id: str, metric: float, steps_completed: int) -> list[Action]:
        """``steps_completed`` is the validation's time step in the searcher's unit (see ``time_step``)."""
        if request_id not in self.live or request_id in self.stopped or self.shut_down:
            return []
        index = self.trial_bracket[request_id]
        if not self.brackets[index].validation(request_id, steps_completed, ranked(metric, self.smaller_is_better)):
            return []
        self.stopped.append(request_id)
        return [Stop(request_id), *self._replace(index)]

    def on_trial_exited(self, request_id: str, outcome: str) -> list[Action]:
        if request_id not in self.live:
            return []
        self.live.remove(request_id)
        self.outcomes[request_id] = outcome
        index = self.trial_bracket[request_id]
        bracket = self.brackets[index]
        bracket.exited += 1
        actions: list[Action] = []
        if request_id in self.stopped:
            self.stopped.remove(request_id)
        else:  # it ended before the searcher stopped it: the worst in its rung, and replaced
            if outcome != "completed":
                bracket.exited_early(request_id)
            actions += self._replace(index)
        if not self.live and not self.shut_down:
            self.shut_down = True
            actions.append(shutdown_after(self.outcomes.values()))
        return actions

    def progress(self, trials: Mapping[str, TrialProgress] | None = None) -> float:
        """The brackets' own progress (trial reports are not needed); 1 once the search is done,
        unless it ended without one trial completing (the experiment's ERROR keeps what it reached)."""
        failed = self.shut_down and "completed" not in self.outcomes.values()
        if self.shut_down and not failed:
            return 1.0
        return sum(b.progress(failed) for b in self.brackets) / len(self.brackets)

    def snapshot(self) -> dict[str, Any]:
        return {"brackets": [b.snapshot() for b in self.brackets], "created": self.created,
                "trial_bracket": dict(self.trial_bracket), "live": list(self.live), "stopped": list(self.stopped),
                "outcomes": dict(self.outcomes), "shut_down": self.shut_down, "rng": rng_state(self.rng)}

    @classmethod
    def restore(cls, cfg: ExperimentConfig, snap: dict[str, Any]) -> AshaSearcher:
        s = cls(cfg)
        for bracket, state in zip(s.brackets, snap["brackets"], strict=True):
            bracket.restore(state)
        s.created = int(snap["created"])
        s.trial_bracket = {str(k): int(v) for k, v in snap["trial_bracket"].items()}
        s.live = [str(r) for r in snap["live"]]
        s.stopped = [str(r) for r in snap["stopped"]]
        s.outcomes = {str(k): str(v) for k, v in snap["outcomes"].items()}
        s.shut_down = bool(snap["shut_down"])
        s.rng = rng_from_state(snap["rng"])
        return s

    def describe(self) -> list[dict[str, Any]]:
        """The brackets as a table: rungs, rung lengths, max_trials, max_concurrent_trials."""
        return [{"num_rungs": b.num_rungs, "rung_lengths": [r.units_needed for r in b.rungs],
                 "max_trials": b.max_trials, "max_concurrent_trials": b.max_concurrent_trials}
                for b in self.brackets]
