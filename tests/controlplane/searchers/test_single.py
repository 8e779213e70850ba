"""single: one trial at the center of every range, seeded from the experiment seed."""

from __future__ import annotations

import json

from controlplane.searchers import Create, Shutdown, make_searcher
from controlplane.searchers.single import SingleSearcher
from tests.controlplane.searchers.support import config, run_to_end


def test_one_trial_at_the_center():
    s = make_searcher(config("single"))
    assert isinstance(s, SingleSearcher)
    (create,) = s.initial_actions()
    assert isinstance(create, Create) and create.request_id == "r1"
    hp = create.hparams
    assert hp["units"] == 36 and hp["act"] == "relu"
    assert abs(hp["lr"] - 1e-2) < 1e-12
    assert hp["opt"] == {"momentum": 0.9, "beta": 0.5}
    assert 0 <= create.seed < 2**32


def test_int_center_is_rounded_and_const_kept():
    hps = {"n": {"type": "int", "minval": 1, "maxval": 4}, "c": {"type": "const", "val": [1, 2]}, "s": "x"}
    (create,) = make_searcher(config("single", hparams=hps)).initial_actions()
    assert isinstance(create.hparams["n"], int) and create.hparams["n"] in (2, 3)
    assert create.hparams["c"] == [1, 2] and create.hparams["s"] == "x"


def test_shutdown_after_the_trial_exits():
    s = make_searcher(config("single"))
    (create,) = s.initial_actions()
    assert s.progress() == 0.0
    assert s.on_validation(create.request_id, 0.5, 10) == []
    assert s.on_trial_exited(create.request_id, "completed") == [Shutdown(failure=False)]
    assert s.progress() == 1.0
    assert s.on_trial_exited(create.request_id, "completed") == []  # a repeat is ignored


def test_errored_trial_shuts_down_with_failure():
    s = make_searcher(config("single"))
    (create,) = s.initial_actions()
    assert s.on_trial_exited(create.request_id, "errored") == [Shutdown(failure=True)]


def test_same_seed_same_trial_seed_and_snapshot_is_json():
    a = make_searcher(config("single", seed=7)).initial_actions()
    b = make_searcher(config("single", seed=7)).initial_actions()
    c = make_searcher(config("single", seed=8)).initial_actions()
    assert a == b and a[0].seed != c[0].seed
    s = make_searcher(config("single"))
    s.initial_actions()
    snap = json.loads(json.dumps(s.snapshot()))
    restored = SingleSearcher.restore(config("single"), snap)
    creates, shutdowns = run_to_end(restored, restored.on_trial_exited("r1", "canceled"))
    assert creates == [] and shutdowns == [Shutdown(cancel=True)]  # a user's cancel is no failure
