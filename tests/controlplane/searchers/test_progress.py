"""A searcher's progress: completed units over its total, never 1 by failing."""

from __future__ import annotations

import pytest

from controlplane.searchers import make_searcher
from controlplane.searchers.progress import TrialProgress, length_in_batches
from tests.controlplane.searchers.support import config


def test_a_trials_fraction_is_the_further_of_its_batches_and_its_own_report():
    # (batches, reported, length in batches, fraction)
    cases = [(0, 0.0, 10, 0.0), (5, 0.0, 10, 0.5), (5, 0.7, 10, 0.7), (30, 0.0, 10, 1.0), (5, 0.25, None, 0.25)]
    for batches, reported, length, fraction in cases:
        assert TrialProgress(batches, reported).fraction(length) == pytest.approx(fraction)


def test_only_a_length_in_batches_converts_batches():
    assert length_in_batches(config("random", max_trials=2, max_length={"batches": 300}).searcher) == 300
    assert length_in_batches(config("random", max_trials=2, max_length={"epochs": 3}).searcher) is None


def test_planned_searchers_count_every_trials_training_over_max_trials_of_the_full_length():
    s = make_searcher(config("random", max_trials=4, max_concurrent_trials=2, max_length={"batches": 100}))
    r1, r2 = (a.request_id for a in s.initial_actions())
    assert s.progress() == 0.0
    assert s.progress({r1: TrialProgress(batches=50), r2: TrialProgress(reported=0.5)}) == pytest.approx(1 / 4)
    s.on_trial_exited(r1, "completed")  # whole, whatever it last reported
    assert s.progress({r1: TrialProgress(batches=90), r2: TrialProgress(batches=20)}) == pytest.approx(1.2 / 4)
    s.on_trial_exited(r2, "errored")  # a failure counts what it trained, not a whole trial
    assert s.progress({r1: TrialProgress(batches=90), r2: TrialProgress(batches=20)}) == pytest.approx(1.2 / 4)


def test_a_search_where_every_trial_failed_is_not_done():
    s = make_searcher(config("single", max_length={"batches": 10}))
    (create,) = s.initial_actions()
    s.on_trial_exited(create.request_id, "errored")
    assert s.progress({create.request_id: TrialProgress(batches=3)}) == pytest.approx(0.3)
    # ASHA: 4 trials, rung 0 at 2 batches. One errored after reaching it, the others before.
    asha = make_searcher(config("async_halving", max_trials=4, num_rungs=2, divisor=2, max_concurrent_trials=4,
                                max_length={"batches": 4}))
    ids = [a.request_id for a in asha.initial_actions()]
    asha.on_validation(ids[0], 0.5, 2)
    for request_id in ids:
        asha.on_trial_exited(request_id, "errored")
    assert asha.progress() == pytest.approx(1 / 4.8)  # not 1: the search failed where it stood


def test_a_stored_basis_gives_the_searchers_own_progress():
    """What a listing computes from ``progress_basis()`` (stored as JSON) is exactly ``progress()``."""
    import json

    from controlplane.searchers.progress import basis_counts_trials, from_basis

    s = make_searcher(config("random", max_trials=4, max_concurrent_trials=2, max_length={"batches": 100}))
    r1, r2 = (a.request_id for a in s.initial_actions())
    trials = {r1: TrialProgress(batches=90), r2: TrialProgress(batches=33, reported=0.1)}
    steps = [lambda: None, lambda: s.on_trial_exited(r1, "completed"), lambda: s.on_trial_exited(r2, "errored")]
    for step in steps:
        step()
        basis = json.loads(json.dumps(s.progress_basis()))
        assert from_basis(basis, trials) == s.progress(trials)
    assert basis["completed"] == 1 and basis_counts_trials(basis) == [r2, "r3", "r4"]  # r1 counts whole
    asha = make_searcher(config("async_halving", max_trials=4, num_rungs=2, divisor=2, max_concurrent_trials=4,
                                max_length={"batches": 4}))
    ids = [a.request_id for a in asha.initial_actions()]
    asha.on_validation(ids[0], 0.5, 2)
    assert asha.progress_basis() == {"value": asha.progress()} and basis_counts_trials(asha.progress_basis()) == []
