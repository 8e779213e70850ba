"""random: max_trials samples reproducible from the experiment seed, restorable mid-search."""

from __future__ import annotations

import json

from controlplane.searchers import Create, Shutdown, make_searcher
from controlplane.searchers.random import RandomSearcher
from tests.controlplane.searchers.support import config, run_to_end, signature


def test_same_seed_same_search_different_seed_different():
    a, _ = run_to_end(make_searcher(config("random", seed=3, max_trials=5)))
    b, _ = run_to_end(make_searcher(config("random", seed=3, max_trials=5)))
    c, _ = run_to_end(make_searcher(config("random", seed=4, max_trials=5)))
    assert signature(a) == signature(b)
    assert [x.hparams for x in a] != [x.hparams for x in c]
    assert [x.seed for x in a] != [x.seed for x in c]


def test_samples_stay_in_range():
    created, _ = run_to_end(make_searcher(config("random", max_trials=50)))
    assert len(created) == 50
    for c in created:
        hp = c.hparams
        assert 1e-3 <= hp["lr"] <= 1e-1
        assert isinstance(hp["units"], int) and 8 <= hp["units"] <= 64
        assert hp["act"] in ("relu", "tanh")
        assert hp["opt"]["momentum"] == 0.9 and 0.0 <= hp["opt"]["beta"] <= 1.0
        assert 0 <= c.seed < 2**32
    assert {c.hparams["act"] for c in created} == {"relu", "tanh"}
    assert len({c.hparams["units"] for c in created}) > 5


def test_int_range_is_inclusive():
    hps = {"n": {"type": "int", "minval": 0, "maxval": 1}}
    created, _ = run_to_end(make_searcher(config("random", hparams=hps, max_trials=40)))
    assert {c.hparams["n"] for c in created} == {0, 1}


def test_concurrency_limit_and_shutdown():
    s = make_searcher(config("random", max_trials=5, max_concurrent_trials=2))
    live = [a.request_id for a in s.initial_actions()]
    assert live == ["r1", "r2"]
    created, shutdowns = 2, []
    while live:
        actions = s.on_trial_exited(live.pop(0), "completed")
        new = [a.request_id for a in actions if isinstance(a, Create)]
        created += len(new)
        live += new
        shutdowns += [a for a in actions if isinstance(a, Shutdown)]
        assert len(live) <= 2
    assert created == 5 and shutdowns == [Shutdown(failure=False)] and s.progress() == 1.0


def test_one_completed_trial_is_success_all_errored_is_failure():
    s = make_searcher(config("random", max_trials=3, max_concurrent_trials=0))
    ids = [a.request_id for a in s.initial_actions()]
    assert len(ids) == 3
    assert s.on_trial_exited(ids[0], "errored") == []
    assert s.on_trial_exited(ids[1], "completed") == []
    assert s.on_trial_exited(ids[2], "canceled") == [Shutdown(failure=False)]
    _, shutdowns = run_to_end(make_searcher(config("random", max_trials=3)), outcome="errored")
    assert shutdowns == [Shutdown(failure=True)]


def test_every_trial_canceled_is_a_cancel_not_a_failure():
    s = make_searcher(config("random", max_trials=2, max_concurrent_trials=0))
    ids = [a.request_id for a in s.initial_actions()]
    assert s.on_trial_exited(ids[0], "canceled") == []
    assert s.on_trial_exited(ids[1], "canceled") == [Shutdown(cancel=True)]
    s = make_searcher(config("random", max_trials=2, max_concurrent_trials=0))
    ids = [a.request_id for a in s.initial_actions()]
    s.on_trial_exited(ids[0], "canceled")
    assert s.on_trial_exited(ids[1], "errored") == [Shutdown(failure=True)]


def test_snapshot_restore_continues_identically():
    cfg = config("random", max_trials=6, max_concurrent_trials=1)
    straight, _ = run_to_end(make_searcher(cfg))
    s = make_searcher(cfg)
    (first,) = s.initial_actions()
    snap = json.loads(json.dumps(s.snapshot()))  # the master stores it as JSON
    restored = RandomSearcher.restore(cfg, snap)
    rest, shutdowns = run_to_end(restored, restored.on_trial_exited(first.request_id, "completed"))
    assert signature([first] + rest) == signature(straight)
    assert shutdowns == [Shutdown(failure=False)]
