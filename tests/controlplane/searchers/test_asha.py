"""adaptive_asha and async_halving: Determined's brackets, rungs and stop decisions, as scenario tables.

Each table is a sequence of events (a validation: trial, metric, time step; an exit: trial, outcome)
and the exact actions the searcher answers with. The expected actions were worked out by hand from
Determined's rules (``master/pkg/searcher/adaptive_asha.go``, ``asha_stopping.go``).
"""

from __future__ import annotations

import json
import math
import random

import pytest

from controlplane.searchers import Create, Shutdown, Stop, make_searcher
from controlplane.searchers.adaptive_asha import (
    AdaptiveAshaSearcher,
    bracket_max_concurrent_trials,
    bracket_max_trials,
    floor_log,
    plan_brackets,
)
from controlplane.searchers.asha import EXITED, AshaSearcher, Rung, rung_lengths, time_step, time_unit
from controlplane.searchers.registry import uses_validations
from tests.controlplane.searchers.support import config


def asha(seed: int = 1, **searcher) -> AshaSearcher:
    s = make_searcher(config(searcher.pop("name", "adaptive_asha"), seed=seed, **searcher))
    assert isinstance(s, AshaSearcher)
    return s


def show(actions: list) -> list[str]:
    out = []
    for a in actions:
        if isinstance(a, Create):
            out.append(f"create {a.request_id}")
        elif isinstance(a, Stop):
            out.append(f"stop {a.request_id}")
        else:
            assert isinstance(a, Shutdown)
            out.append("shutdown failed" if a.failure else "shutdown")
    return out


def play(s: AshaSearcher, table: list[tuple]) -> None:
    """Rows: ("val", trial, metric, step, expected) or ("exit", trial, outcome, expected)."""
    for n, row in enumerate(table):
        if row[0] == "val":
            _, rid, metric, step, expected = row
            got = show(s.on_validation(rid, metric, step))
        else:
            _, rid, outcome, expected = row
            got = show(s.on_trial_exited(rid, outcome))
        assert got == expected, f"row {n}: {row}"


# ---- Determined's own figures ---------------------------------------------------------------------


def test_bracket_max_trials_match_determined():
    assert bracket_max_trials(20, 3.0, [3, 2, 1]) == [12, 5, 3]
    assert bracket_max_trials(50, 3.0, [4, 3]) == [35, 15]
    assert bracket_max_trials(50, 4.0, [3, 2]) == [37, 13]
    assert bracket_max_trials(100, 4.0, [4, 3, 2]) == [70, 22, 8]


def test_bracket_max_concurrent_trials_match_determined():
    assert bracket_max_concurrent_trials(0, 3.0, [9, 3, 1]) == [3, 3, 3]
    assert bracket_max_concurrent_trials(11, 3.0, [9, 3, 1]) == [4, 4, 3]
    assert bracket_max_concurrent_trials(0, 4.0, [40, 10]) == [10, 10]
    assert bracket_max_concurrent_trials(2, 4.0, [5, 3, 1]) == [1, 1, 1]  # at least one per bracket


def test_brackets_match_determined_make_brackets():
    standard = config("adaptive_asha", mode="standard", time_metric="batches", max_time=100,
                      max_concurrent_trials=2, max_trials=10).searcher
    assert plan_brackets(standard) == [(2, 7, 1), (1, 3, 1)]
    conservative = config("adaptive_asha", mode="conservative", time_metric="batches", max_time=1000, divisor=3,
                          max_concurrent_trials=5, max_trials=10).searcher
    assert plan_brackets(conservative) == [(3, 7, 2), (2, 2, 2), (1, 1, 1)]


def test_rung_lengths_match_determined():
    assert rung_lengths(3, 3.0, 9) == [1, 3, 9]
    assert rung_lengths(4, 2.0, 10) == [1, 2, 5, 10]
    assert rung_lengths(1, 3.0, 9) == [9]
    assert rung_lengths(3, 3.0, 900) == [100, 300, 900]
    assert rung_lengths(3, 1e300, 10) == [1, 1, 10]  # divisor**2 overflows: the rung is 1 unit


def test_rung_insert_matches_determined():
    for new, existing, index, after in [(1.2, [0.0, 1.5, 2.1], 1, [0.0, 1.2, 1.5, 2.1]),
                                        (3.0, [0.0, 1.5, 2.0], 3, [0.0, 1.5, 2.0, 3.0]),
                                        (-3.4, [-3.0, -2.0, -1.0], 0, [-3.4, -3.0, -2.0, -1.0]),
                                        (1.2, [], 0, [1.2]),
                                        (1.5, [1.0, 1.5], 1, [1.0, 1.5, 1.5])]:  # before equals
        rung = Rung(1, [(v, "x") for v in existing])
        assert rung.insert("new", new) == index
        assert [v for v, _ in rung.metrics] == after
    rung = Rung(1, [(1.5, "old")])
    rung.insert("new", 1.5)
    assert rung.metrics == [(1.5, "new"), (1.5, "old")]


def test_floor_log_is_exact_for_powers():
    assert floor_log(1000, 10.0, 64) == 3  # math.log(1000) / math.log(10) would give 2
    assert floor_log(100, 4.0, 64) == 3 and floor_log(10, 4.0, 64) == 1 and floor_log(1, 4.0, 64) == 0
    assert floor_log(2**31, 1.0000001, 5) == 5  # capped, in a few steps


def test_async_halving_stopping_search_matches_determined():
    """Determined's TestASHAStoppingSearchMethod: 10 trials, validations every 100 batches with an
    ever worse metric, trials run one after the other: one reaches 900, nine stop at 100."""
    s = asha(name="async_halving", max_trials=10, max_concurrent_trials=3, divisor=3, num_rungs=3,
             time_metric="batches", max_time=900)
    assert s.describe() == [{"num_rungs": 3, "rung_lengths": [100, 300, 900], "max_trials": 10,
                             "max_concurrent_trials": 3}]
    trials = [a.request_id for a in s.initial_actions()]
    stopped_at: dict[str, int] = {}
    shutdowns = []
    metric = 0.0
    for rid in trials:  # grows as the searcher creates
        for step in range(0, 901, 100):
            metric += 1
            actions = s.on_validation(rid, metric, step)
            trials += [a.request_id for a in actions if isinstance(a, Create)]
            if Stop(rid) in actions:
                stopped_at[rid] = step
                break
        shutdowns += [a for a in s.on_trial_exited(rid, "completed") if isinstance(a, Shutdown)]
    assert len(trials) == 10
    assert sorted(stopped_at.values()) == [100] * 9 + [900]
    assert shutdowns == [Shutdown(failure=False)] and s.progress() == 1.0


# ---- scenario tables, one per mode ----------------------------------------------------------------


def test_aggressive_one_bracket_scenario():
    s = asha(mode="aggressive", max_trials=6, divisor=2, max_rungs=3, time_metric="batches", max_time=8,
             max_concurrent_trials=2)
    # max_rungs = min(3, floor(log2 8) + 1, floor(log2 6) + 1) = 3; one bracket of rungs 2, 4, 8
    assert s.describe() == [{"num_rungs": 3, "rung_lengths": [2, 4, 8], "max_trials": 6,
                             "max_concurrent_trials": 2}]
    assert show(s.initial_actions()) == ["create r1", "create r2"]
    play(s, [
        ("val", "r1", 0.5, 1, []),                    # short of rung 0 (2 batches)
        ("val", "r1", 0.5, 2, []),                    # rung 0: [r1]; keep max(1 // 2, 1) = 1
        ("val", "r2", 0.7, 2, ["stop r2", "create r3"]),  # rung 0: [r1, r2]; r2 is 2nd of keep 1
        ("val", "r2", 0.1, 4, []),                    # r2 is stopped: later validations decide nothing
        ("val", "r3", 0.3, 2, []),                    # rung 0: [r3, r1, r2]; first
        ("val", "r1", 0.4, 4, []),                    # rung 1: [r1]
        ("exit", "r2", "completed", []),              # a stopped trial ending: already replaced
        ("val", "r3", 0.35, 4, []),                   # rung 1: [r3, r1]; keep 1, r3 first
        ("val", "r1", 0.2, 8, ["stop r1", "create r4"]),  # top rung: the full length is trained
        ("val", "r4", 0.9, 2, ["stop r4", "create r5"]),  # rung 0: [.3 .5 .7 .9]; keep 2, r4 is 4th
        ("exit", "r3", "errored", ["create r6"]),     # worst of rung 2, replaced (created 6 of 6)
        ("val", "r5", 0.1, 8, ["stop r5"]),           # passes rungs 0 and 1 at once; top; no 7th trial
        ("exit", "r1", "completed", []),
        ("exit", "r4", "completed", []),
        ("val", "r6", 0.6, 2, ["stop r6"]),           # rung 0: [.1 .3 .5 .6 .7 .9]; keep 3, r6 is 4th
        ("exit", "r5", "completed", []),
        ("exit", "r6", "completed", ["shutdown"]),
    ])
    assert [(v, rid) for v, rid in s.brackets[0].rungs[2].metrics] == [(0.1, "r5"), (0.2, "r1"), (EXITED, "r3")]
    assert s.progress() == 1.0


def test_standard_three_brackets_scenario():
    s = asha(mode="standard", max_trials=8, divisor=2, time_metric="batches", max_time=16, max_concurrent_trials=6)
    # max_rungs = min(5, floor(log2 16) + 1 = 5, floor(log2 8) + 1 = 4) = 4; standard: 2..4 rungs.
    # weights 8/4, 4/3, 2/2 of 8 trials: 3, 2, 1 and the remainder 2 to the first; 6 concurrent: 2 each.
    assert s.describe() == [
        {"num_rungs": 4, "rung_lengths": [2, 4, 8, 16], "max_trials": 5, "max_concurrent_trials": 2},
        {"num_rungs": 3, "rung_lengths": [4, 8, 16], "max_trials": 2, "max_concurrent_trials": 2},
        {"num_rungs": 2, "rung_lengths": [8, 16], "max_trials": 1, "max_concurrent_trials": 2},
    ]
    # bracket 0: r1 r2; bracket 1: r3 r4; bracket 2: r5 (its max_trials is 1)
    assert show(s.initial_actions()) == ["create r1", "create r2", "create r3", "create r4", "create r5"]
    play(s, [
        ("val", "r1", 1.0, 2, []),                    # b0 rung 0: [r1]
        ("val", "r3", 1.0, 4, []),                    # b1 rung 0: [r3]; rungs are per bracket
        ("val", "r2", 2.0, 2, ["stop r2", "create r6"]),  # b0 rung 0: [r1, r2]; keep 1
        ("val", "r4", 0.5, 4, []),                    # b1 rung 0: [r4, r3]; r4 first
        ("val", "r5", 9.0, 8, []),                    # b2 rung 0: [r5]; alone, it goes on
        ("val", "r3", 1.0, 8, []),                    # b1: r3 was working towards rung 1 (8): [r3]
        ("val", "r4", 0.4, 8, []),                    # b1 rung 1: [r4, r3]; first
        ("val", "r6", 0.5, 4, []),                    # b0 rung 0: [r6, r1, r2]; rung 1: [r6]
        ("val", "r1", 0.9, 4, ["stop r1", "create r7"]),  # b0 rung 1: [r6, r1]; keep 1
        ("exit", "r3", "canceled", []),               # b1 created 2 of 2: nothing to replace it with
        ("val", "r4", 0.3, 16, ["stop r4"]),          # b1 top rung
        ("val", "r7", 3.0, 2, ["stop r7", "create r8"]),  # b0 rung 0: [.5 1 2 3]; keep 2, r7 is 4th
        ("val", "r5", 8.0, 16, ["stop r5"]),          # b2 top rung
        ("val", "r8", 0.1, 16, ["stop r8"]),          # b0: all four rungs at once; created 5 of 5
        ("val", "r6", 0.45, 8, ["stop r6"]),          # b0 rung 2: [r8, r6]; keep max(2 // 2, 1) = 1
        ("exit", "r1", "completed", []), ("exit", "r2", "completed", []), ("exit", "r4", "completed", []),
        ("exit", "r5", "completed", []), ("exit", "r6", "completed", []), ("exit", "r7", "completed", []),
        ("exit", "r8", "completed", ["shutdown"]),
    ])
    assert s.progress() == 1.0


def test_conservative_three_brackets_scenario():
    s = asha(mode="conservative", max_trials=9, divisor=3, time_metric="batches", max_time=9, max_concurrent_trials=0)
    # max_rungs = min(5, floor(log3 9) + 1, floor(log3 9) + 1) = 3; conservative: 3, 2, 1 rungs.
    # weights 9/3, 3/2, 1/1 of 9: 4, 2, 1 and the remainder 2 to the first. 0 concurrent:
    # max(max_trials of the last bracket, divisor) = 3 each, started min(3, max_trials).
    assert s.describe() == [
        {"num_rungs": 3, "rung_lengths": [1, 3, 9], "max_trials": 6, "max_concurrent_trials": 3},
        {"num_rungs": 2, "rung_lengths": [3, 9], "max_trials": 2, "max_concurrent_trials": 3},
        {"num_rungs": 1, "rung_lengths": [9], "max_trials": 1, "max_concurrent_trials": 3},
    ]
    assert show(s.initial_actions()) == ["create r1", "create r2", "create r3", "create r4", "create r5",
                                         "create r6"]
    play(s, [
        ("val", "r1", 0.5, 1, []),                    # b0 rung 0: [r1]
        ("val", "r2", 0.4, 1, []),                    # [r2, r1]; keep max(2 // 3, 1) = 1; r2 first
        ("val", "r3", 0.6, 1, ["stop r3", "create r7"]),  # [r2, r1, r3]; keep 1
        ("val", "r6", 0.9, 3, []),                    # b2: its only rung is 9
        ("val", "r4", 0.8, 3, []),                    # b1 rung 0: [r4]
        ("val", "r5", 0.7, 3, []),                    # b1 rung 0: [r5, r4]; keep 1, first
        ("val", "r4", 0.6, 9, ["stop r4"]),           # b1 top; created 2 of 2
        ("exit", "r1", "errored", ["create r8"]),     # b0: worst of rung 1 (where r1 was going), replaced
        ("val", "r2", 0.3, 3, []),                    # b0 rung 1: [r2, r1 exited]
        ("val", "r7", 0.2, 1, []),                    # b0 rung 0: [r7 .2, r2 .4, r1 .5, r3 .6]; keep 1
        ("val", "r8", 0.35, 3, ["stop r8", "create r9"]),  # rung 0: 2nd of keep max(5 // 3, 1) = 1
        ("val", "r6", 0.9, 9, ["stop r6"]),           # b2 top
        ("val", "r9", math.nan, 1, ["stop r9"]),      # NaN ranks last; created 6 of 6 in b0
        ("val", "r7", 0.25, 3, []),                   # b0 rung 1: [r7, r2, r1 exited]; keep 1
        ("val", "r2", 0.3, 9, ["stop r2"]),           # b0 top rung
        ("val", "r7", 0.1, 9, ["stop r7"]),
        ("val", "r5", 0.7, 9, ["stop r5"]),
    ])
    play(s, [("exit", rid, "completed", []) for rid in ("r2", "r3", "r4", "r5", "r6", "r7", "r8")])
    play(s, [("exit", "r9", "completed", ["shutdown"])])


def test_async_halving_scenario_larger_is_better():
    s = asha(name="async_halving", smaller_is_better=False, max_trials=4, num_rungs=2, divisor=2,
             max_length={"batches": 4}, max_concurrent_trials=2)
    assert s.describe() == [{"num_rungs": 2, "rung_lengths": [2, 4], "max_trials": 4, "max_concurrent_trials": 2}]
    assert show(s.initial_actions()) == ["create r1", "create r2"]
    play(s, [
        ("val", "r1", 0.8, 2, []),                    # accuracy: larger is better
        ("val", "r2", 0.9, 2, []),                    # [r2, r1]; keep 1; r2 first
        ("val", "r1", 0.85, 4, ["stop r1", "create r3"]),  # top rung
        ("val", "r3", 0.85, 2, ["stop r3", "create r4"]),  # [r2 .9, r3 .85, r1 .8]; keep 3 // 2 = 1
        ("exit", "r2", "errored", []),                # worst of the top rung; 4 of 4 created
        ("exit", "r1", "completed", []),
        ("exit", "r3", "completed", []),
        ("val", "r4", 0.95, 2, []),
        ("exit", "r4", "completed", ["shutdown"]),    # ended on its own before any stop
    ])


def test_a_trial_that_ends_on_its_own_is_replaced():
    s = asha(name="async_halving", max_trials=3, num_rungs=2, divisor=2, max_length=4, max_concurrent_trials=1)
    assert show(s.initial_actions()) == ["create r1"]
    play(s, [("exit", "r1", "completed", ["create r2"]),
             ("exit", "r2", "errored", ["create r3"]),
             ("exit", "r3", "errored", ["shutdown"])])
    s = asha(name="async_halving", max_trials=2, num_rungs=2, divisor=2, max_length=4, max_concurrent_trials=2)
    s.initial_actions()
    play(s, [("exit", "r1", "errored", []), ("exit", "r2", "canceled", ["shutdown failed"])])


def test_unknown_and_finished_trials_are_ignored():
    s = asha(name="async_halving", max_trials=2, num_rungs=2, divisor=2, max_length=4, max_concurrent_trials=2)
    s.initial_actions()
    assert s.on_validation("nope", 1.0, 4) == [] and s.on_trial_exited("nope", "completed") == []
    play(s, [("exit", "r1", "completed", []), ("val", "r1", 0.1, 4, []), ("exit", "r1", "completed", [])])


# ---- concurrency, determinism, snapshots -----------------------------------------------------------


def drive(s: AshaSearcher, seed: int, restore_every_event: bool = False) -> list[tuple]:
    """Plays a whole search with random curves and random event order; returns every action."""
    rng = random.Random(seed)
    log: list[tuple] = []
    quality: dict[str, float] = {}
    progress: dict[str, int] = {}
    stopping: set[str] = set()
    live: list[str] = []
    limit = sum(b["max_concurrent_trials"] for b in s.describe())
    length = s.brackets[0].rungs[-1].units_needed

    def take(actions: list) -> None:
        for a in actions:
            log.append((type(a).__name__, getattr(a, "request_id", None), getattr(a, "hparams", None),
                        getattr(a, "seed", None), getattr(a, "failure", None)))
            if isinstance(a, Create):
                live.append(a.request_id)
                quality[a.request_id] = rng.random()
                progress[a.request_id] = 0
            elif isinstance(a, Stop):
                stopping.add(a.request_id)
        assert len([r for r in live if r not in stopping]) <= limit

    take(s.initial_actions())
    while live:
        if restore_every_event:
            s = type(s).restore(s.cfg, json.loads(json.dumps(s.snapshot())))
        rid = rng.choice(live)
        if rid in stopping or progress[rid] >= length or rng.random() < 0.03:
            live.remove(rid)
            outcome = "completed" if rid in stopping or rng.random() < 0.5 else "errored"
            take(s.on_trial_exited(rid, outcome))
            continue
        progress[rid] = min(length, progress[rid] + rng.randint(1, 3))
        take(s.on_validation(rid, quality[rid] + 1 / progress[rid], progress[rid]))
    assert log[-1][0] == "Shutdown" and s.progress() == 1.0
    return log


@pytest.mark.parametrize("mode", ["aggressive", "standard", "conservative"])
def test_snapshot_restore_after_every_event_gives_the_same_search(mode):
    cfg = config("adaptive_asha", seed=5, mode=mode, max_trials=40, divisor=3, time_metric="batches", max_time=27,
                 max_concurrent_trials=5)
    straight = drive(make_searcher(cfg), seed=11)  # type: ignore[arg-type]
    restored = drive(make_searcher(cfg), seed=11, restore_every_event=True)  # type: ignore[arg-type]
    assert straight == restored
    creates = [row for row in straight if row[0] == "Create"]
    assert len(creates) == 40 and len({row[1] for row in creates}) == 40


def test_snapshot_is_plain_json():
    s = asha(max_trials=8, time_metric="batches", max_time=16, max_concurrent_trials=2)
    s.initial_actions()
    s.on_validation("r1", math.inf, 16)  # stored finite, so PostgreSQL's JSON accepts it
    s.on_trial_exited("r2", "errored")
    snap = s.snapshot()
    assert json.loads(json.dumps(snap, allow_nan=False)) == snap


def test_same_seed_same_search_different_seed_different():
    def creates(seed: int) -> list:
        s = asha(seed=seed, max_trials=10, time_metric="batches", max_time=16, max_concurrent_trials=10)
        return [(a.request_id, a.hparams, a.seed) for a in s.initial_actions()]

    assert creates(3) == creates(3)
    assert [c[1:] for c in creates(3)] != [c[1:] for c in creates(4)]


@pytest.mark.parametrize("mode", ["aggressive", "standard", "conservative"])
def test_concurrency_is_kept_and_max_trials_reached(mode):
    s = make_searcher(config("adaptive_asha", mode=mode, max_trials=30, time_metric="batches", max_time=64,
                             max_concurrent_trials=4))
    assert isinstance(s, AdaptiveAshaSearcher)
    log = drive(s, seed=2)
    assert len([row for row in log if row[0] == "Create"]) == 30


def test_progress_grows_to_one():
    s = asha(name="async_halving", max_trials=4, num_rungs=2, divisor=2, max_length=4, max_concurrent_trials=4)
    s.initial_actions()
    assert s.progress() == 0.0
    s.on_validation("r1", 1.0, 2)
    assert s.progress() == pytest.approx(1 / 4.8)
    for rid in ("r1", "r2", "r3", "r4"):
        s.on_trial_exited(rid, "completed")
    assert s.progress() == 1.0


def test_time_step_and_unit():
    assert time_unit({"time_metric": "epochs", "max_length": {"batches": 4}}) == "epochs"
    assert time_unit({"max_length": {"records": 100}}) == "records" and time_unit({"max_length": 5}) == "batches"
    assert time_step("batches", {"loss": 1.0}, 40) == 40  # the trial's steps when it reports no batches
    assert time_step("batches", {"batches": 32.0}, 40) == 32
    assert time_step("epochs", {"epochs": 2.7}, 40) == 2  # truncated, as Determined's uint64()
    assert time_step("epochs", {"loss": 1.0}, 40) is None  # unknown: the validation decides nothing
    assert time_step("epochs", {"epochs": "NaN"}, 40) is None and time_step("epochs", {"epochs": True}, 40) is None


def test_asha_searchers_listen_to_validations():
    assert uses_validations("adaptive_asha") and uses_validations("async_halving")
    assert isinstance(make_searcher(config("async_halving", max_trials=2, num_rungs=2)), AshaSearcher)
