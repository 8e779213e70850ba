"""Compute to reach a target loss: adaptive ASHA vs random search vs Optuna's pruners, same curves.

A synthetic, seeded family of learning curves (nothing downloaded). A configuration is a learning
rate ``lr`` (log-uniform 1e-4..1e-1) and a ``width`` (uniform 0..1); its validation loss after
``t`` batches is

    loss(t) = a + 2 * (1 + t / 32) ** -c + noise,         noise ~ N(0, 0.005) per (configuration, t)

The floor ``a`` is lowest at ``lr = 1e-3`` and for wide models; the speed ``c`` grows with the
learning rate and shrinks with width, so fast starters often end higher and curves cross (the
output prints how well the loss at ASHA's lowest rung ranks the final loss); each configuration
has its own luck in ``a`` and ``c``. The target is the loss the best 1% of configurations reach at
the full length (noise-free, from 4,000 configurations of a separate seed).

Every method runs ``--workers`` trials at a time on one simulated clock (a trial trains
``--period`` batches between validations) and ends as soon as one validation reports a loss at or
below the target. Its compute is the number of batches all its trials trained until then. Methods
differ only in which trials they stop and when: the n-th trial any method starts is the landscape's
n-th configuration (common random numbers; the searchers and Optuna draw from the same
distributions, so this changes the variance of the comparison, not its expectation).

- adaptive ASHA: this platform's searcher (``make_searcher``; ``divisor: 4``, ``max_rungs: 5``,
  ``max_concurrent_trials`` = workers), in each ``mode``; ``asha`` is Determined's default,
  ``standard``. A ``Stop`` ends the trial at that validation.
- random: this platform's random searcher; every trial trains the full length.
- Optuna's SuccessiveHalvingPruner and HyperbandPruner (RandomSampler) with ASHA's settings:
  reduction factor 4, minimum resource ASHA's lowest rung, maximum the full length. A trial reports
  every validation and ends when ``should_prune()`` says so.

``--max-trials`` only bounds a run that never gets there (it is then marked '!', its compute counted).
Figures are summed over ``--seeds`` landscapes (seeds 1..n).

    .venv/bin/python benchmarks/asha.py                  # 20 landscapes, about a minute
    .venv/bin/python benchmarks/asha.py --seeds 1 --max-trials 60 --max-length 256 --workers 4  # < 1 s
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import math
import random
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from controlplane.config.experiment import ExperimentConfig, parse_experiment_config
from controlplane.searchers import Create, Stop, make_searcher
from controlplane.searchers.asha import AshaSearcher
from controlplane.searchers.base import Searcher

LR_RANGE = (-4.0, -1.0)  # log10
NOISE = 0.005
MODES = ("standard", "aggressive", "conservative")


# ---- the curves ----------------------------------------------------------------------------------


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) fixed by ``parts`` (the same in every method and run)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return struct.unpack("<Q", digest)[0] / 2**64


def _gauss(*parts: object) -> float:
    u1, u2 = max(_unit(*parts, 1), 1e-300), _unit(*parts, 2)
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


@dataclass(frozen=True)
class Curve:
    a: float
    c: float
    key: tuple[Any, ...]

    def clean(self, t: float) -> float:
        return self.a + 2.0 * (1 + t / 32) ** -self.c

    def loss(self, t: int) -> float:
        return self.clean(t) + NOISE * _gauss(self.key, t)


def curve(landscape: int, lr: float, width: float) -> Curve:
    key = (landscape, round(lr, 15), round(width, 15))
    u = math.log10(lr)
    floor_penalty = min((u + 3.0) ** 2, 2.0) / 2  # 0 at lr = 1e-3
    a = 0.05 + 0.3 * floor_penalty + 0.2 * (1 - width) + 0.05 * _gauss(key, "a")
    speed = (u - LR_RANGE[0]) / (LR_RANGE[1] - LR_RANGE[0])  # 0 at 1e-4 .. 1 at 1e-1
    c = (0.2 + 0.8 * speed) * (1.2 - 0.6 * width) * math.exp(0.2 * _gauss(key, "c"))
    return Curve(a=a, c=max(c, 0.05), key=key)


def configurations(landscape: int) -> Iterator[Curve]:
    draws = random.Random(f"configurations-{landscape}")
    while True:
        yield curve(landscape, 10 ** draws.uniform(*LR_RANGE), draws.random())


def target_loss(landscape: int, max_length: int) -> float:
    rng = random.Random(f"target-{landscape}")
    finals = sorted(curve(landscape, 10 ** rng.uniform(*LR_RANGE), rng.random()).clean(max_length)
                    for _ in range(4000))
    return finals[len(finals) // 100]


def rank_correlation(landscape: int, early: int, max_length: int, n: int = 2000) -> float:
    """Spearman's rho between the loss after ``early`` batches and the final loss (no ties: floats)."""
    curves = [c for c, _ in zip(configurations(landscape + 10_000), range(n), strict=False)]

    def ranks(xs: list[float]) -> list[int]:
        out = [0] * len(xs)
        for r, i in enumerate(sorted(range(len(xs)), key=xs.__getitem__)):
            out[i] = r
        return out

    a, b = ranks([c.loss(early) for c in curves]), ranks([c.clean(max_length) for c in curves])
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / (n * (n * n - 1))


# ---- one simulated cluster -----------------------------------------------------------------------


@dataclass
class Outcome:
    compute: int = 0
    trials: int = 0
    reached: bool = False


@dataclass
class Trial:
    name: Any
    curve: Curve
    steps: int = 0


@dataclass(order=True)
class _Event:
    time: int
    seq: int
    trial: Trial = field(compare=False)


class Cluster:
    """Trials train ``period`` batches per event, in time order, until a validation reaches the target."""

    def __init__(self, landscape: int, target: float, max_length: int, period: int) -> None:
        self.target, self.max_length, self.period = target, max_length, period
        self.now = self.seq = 0
        self.queue: list[_Event] = []
        self.out = Outcome()
        self.configurations = configurations(landscape)

    def start(self, name: Any) -> None:
        """Starts the landscape's next configuration (every method's n-th trial is the same one)."""
        self.out.trials += 1
        self.again(Trial(name, next(self.configurations)))

    def again(self, trial: Trial) -> None:
        self.seq += 1
        heapq.heappush(self.queue, _Event(self.now + self.period, self.seq, trial))

    def validations(self) -> Iterator[tuple[Trial, int, float]]:
        """(trial, batches trained, validation loss); the caller decides, then calls ``again`` or not."""
        while self.queue:
            ev = heapq.heappop(self.queue)
            self.now, trial = ev.time, ev.trial
            trial.steps = min(trial.steps + self.period, self.max_length)
            self.out.compute += self.period
            loss = trial.curve.loss(trial.steps)
            if loss <= self.target:
                self.out.reached = True
                return
            yield trial, trial.steps, loss


# ---- the methods ---------------------------------------------------------------------------------


def experiment(name: str, a: argparse.Namespace, seed: int, mode: str = "standard") -> ExperimentConfig:
    searcher: dict[str, Any] = {"name": name, "metric": "loss", "max_trials": a.max_trials,
                                "max_concurrent_trials": a.workers}
    if name == "adaptive_asha":
        searcher.update(mode=mode, divisor=4, max_rungs=5, time_metric="batches", max_time=a.max_length)
    else:
        searcher["max_length"] = {"batches": a.max_length}
    return parse_experiment_config({
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": LR_RANGE[0], "maxval": LR_RANGE[1]},
                            "width": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": searcher,
        "reproducibility": {"experiment_seed": seed},
    })


def run_searcher(searcher: Searcher, cluster: Cluster, *, listens: bool) -> Outcome:
    stopping: set[str] = set()

    def apply(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Create):
                cluster.start(action.request_id)
            elif isinstance(action, Stop):
                stopping.add(action.request_id)

    apply(searcher.initial_actions())
    for trial, steps, loss in cluster.validations():
        if listens:
            apply(searcher.on_validation(trial.name, loss, steps))
        if trial.name in stopping or steps >= cluster.max_length:
            apply(searcher.on_trial_exited(trial.name, "completed"))
        else:
            cluster.again(trial)
    return cluster.out


def run_optuna(landscape: int, cluster: Cluster, a: argparse.Namespace, pruner: Any) -> Outcome:
    import optuna

    study = optuna.create_study(study_name=f"asha-benchmark-{landscape}",  # Hyperband hashes it: fixed
                                sampler=optuna.samplers.RandomSampler(seed=landscape), pruner=pruner)
    asked = 0

    def ask() -> None:
        nonlocal asked
        if asked < a.max_trials:
            asked += 1
            trial = study.ask()
            trial.suggest_float("lr", 10 ** LR_RANGE[0], 10 ** LR_RANGE[1], log=True)
            trial.suggest_float("width", 0.0, 1.0)
            cluster.start(trial)

    for _ in range(a.workers):
        ask()
    for trial, steps, loss in cluster.validations():
        ot = trial.name
        ot.report(loss, steps)
        if steps >= cluster.max_length:
            study.tell(ot, loss)
            ask()
        elif ot.should_prune():
            study.tell(ot, state=optuna.trial.TrialState.PRUNED)
            ask()
        else:
            cluster.again(trial)
    return cluster.out


# ---- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="landscapes, seeds 1..n (default 20)")
    ap.add_argument("--max-trials", type=int, default=5000, help="trials at most per method and landscape "
                                                                 "(default 5000: in effect until the target)")
    ap.add_argument("--workers", type=int, default=16, help="trials at a time (default 16)")
    ap.add_argument("--max-length", type=int, default=4096, help="full training length in batches (default 4096)")
    ap.add_argument("--period", type=int, default=16, help="batches between validations (default 16)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    probe = make_searcher(experiment("adaptive_asha", a, 1))
    assert isinstance(probe, AshaSearcher)
    brackets = probe.describe()
    rung = min(b["rung_lengths"][0] for b in brackets)
    pruners: dict[str, Callable[[], Any]] = {
        "optuna_sh": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=rung, reduction_factor=4),
        "optuna_hb": lambda: optuna.pruners.HyperbandPruner(min_resource=rung, max_resource=a.max_length,
                                                            reduction_factor=4),
    }
    methods = ["asha", "asha_aggressive", "asha_conservative", "random", *pruners]
    totals = dict.fromkeys(methods, 0)
    missed = dict.fromkeys(methods, 0)
    rows = []
    for landscape in range(1, a.seeds + 1):
        target = target_loss(landscape, a.max_length)
        outs: dict[str, Outcome] = {}
        for method in methods:
            cluster = Cluster(landscape, target, a.max_length, a.period)
            if method.startswith("asha"):
                mode = method.partition("_")[2] or "standard"
                searcher = make_searcher(experiment("adaptive_asha", a, landscape, mode))
                outs[method] = run_searcher(searcher, cluster, listens=True)
            elif method == "random":
                outs[method] = run_searcher(make_searcher(experiment("random", a, landscape)), cluster, listens=False)
            else:
                outs[method] = run_optuna(landscape, cluster, a, pruners[method]())
            totals[method] += outs[method].compute
            missed[method] += not outs[method].reached
        rows.append((landscape, target, outs))

    rho = rank_correlation(1, rung, a.max_length)
    print(f"curves: loss(t) = a + 2 (1 + t/32)^-c + N(0, {NOISE}); {a.seeds} landscape(s); target: the best 1% of "
          f"configurations at the full length ({a.max_length} batches); the loss after {rung} batches ranks the "
          f"final loss with Spearman rho {rho:.2f}")
    print(f"every method: {a.workers} trials at a time, a validation every {a.period} batches, at most "
          f"{a.max_trials} trials; compute = batches trained by all trials until a validation reaches the target")
    print("adaptive ASHA standard (divisor 4, max_rungs 5), brackets: "
          + "; ".join(f"{b['num_rungs']} rungs {b['rung_lengths']}, {b['max_trials']} trials, "
                      f"{b['max_concurrent_trials']} at a time" for b in brackets))
    print(f"Optuna {optuna.__version__}: SuccessiveHalving and Hyperband, reduction factor 4, min resource {rung} "
          f"batches, max {a.max_length}, RandomSampler")
    print()
    print(f"{'seed':>4} {'target':>7} " + " ".join(f"{m:>18}" for m in methods) + "   (batches, trials)")
    for landscape, target, outs in rows:
        cells = [f"{o.compute:>10,}{'' if o.reached else '!':1}{o.trials:>6}" for o in outs.values()]
        print(f"{landscape:>4} {target:7.4f} " + " ".join(f"{c:>18}" for c in cells))
    print(f"{'sum':>12} " + " ".join(f"{totals[m]:>10,}{'':8}" for m in methods))
    print("('!': the target was not reached within --max-trials trials; the compute spent is counted)")
    best_optuna = min(totals["optuna_sh"], totals["optuna_hb"])
    figures: dict[str, Any] = {
        "seeds": a.seeds,
        "asha_compute": totals["asha"], "asha_aggressive_compute": totals["asha_aggressive"],
        "asha_conservative_compute": totals["asha_conservative"], "random_compute": totals["random"],
        "optuna_sh_compute": totals["optuna_sh"], "optuna_hb_compute": totals["optuna_hb"],
        "asha_vs_random": totals["asha"] / max(totals["random"], 1),
        "asha_vs_best_optuna": totals["asha"] / max(best_optuna, 1),
        "asha_vs_optuna_hb": totals["asha"] / max(totals["optuna_hb"], 1),
        "asha_aggressive_vs_random": totals["asha_aggressive"] / max(totals["random"], 1),
        "asha_aggressive_vs_best_optuna": totals["asha_aggressive"] / max(best_optuna, 1),
        "missed": sum(missed.values()),
        "rank_rho": rho,
    }
    checks = [
        (figures["asha_vs_random"] <= 0.5, "ASHA (standard) spends at most half of random search's compute"),
        (figures["asha_vs_best_optuna"] <= 1.0, "ASHA (standard) spends no more than Optuna's best pruner"),
        (figures["asha_aggressive_vs_random"] <= 0.5, "ASHA (aggressive) spends at most half of random search's"),
        (figures["asha_aggressive_vs_best_optuna"] <= 1.0, "ASHA (aggressive) spends no more than Optuna's best "
                                                           "pruner"),
    ]
    for ok, text in checks:
        print(f"{'MET ' if ok else 'MISS'}  {text}")
    figures["targets_met"] = sum(ok for ok, _ in checks)
    figures["targets"] = len(checks)
    figures["wall_s"] = time.monotonic() - started
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
