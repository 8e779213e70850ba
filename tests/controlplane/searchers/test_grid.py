"""grid: the cartesian product of the grid axes, a few trials at a time."""

from __future__ import annotations

import json

import pytest

from controlplane.config.errors import ConfigError
from controlplane.searchers import Create, Shutdown, make_searcher
from controlplane.searchers.grid import GridSearcher
from tests.controlplane.searchers.support import config, run_to_end, signature


def test_grid_covers_every_combination():
    created, shutdowns = run_to_end(make_searcher(config("grid")))
    assert len(created) == 3 * 2 * 2 * 1
    assert {c.hparams["units"] for c in created} == {8, 64}
    assert sorted({round(c.hparams["lr"], 12) for c in created}) == [0.001, 0.01, 0.1]
    assert len({(c.hparams["lr"], c.hparams["units"], c.hparams["act"]) for c in created}) == 12
    assert all(c.hparams["opt"] == {"momentum": 0.9, "beta": 0.5} for c in created)
    assert [c.request_id for c in created] == [f"r{i}" for i in range(1, 13)]
    assert shutdowns == [Shutdown(failure=False)]


def test_double_axis_includes_both_ends():
    hps = {"x": {"type": "double", "minval": 0, "maxval": 1, "count": 3}, "y": {"type": "int", "minval": 1,
                                                                                  "maxval": 3, "count": 3}}
    created, _ = run_to_end(make_searcher(config("grid", hparams=hps)))
    assert sorted({c.hparams["x"] for c in created}) == [0.0, 0.5, 1.0]
    assert sorted({c.hparams["y"] for c in created}) == [1, 2, 3]
    assert len(created) == 9


def test_concurrency_limit():
    s = make_searcher(config("grid", max_concurrent_trials=3))
    live = [a.request_id for a in s.initial_actions() if isinstance(a, Create)]
    assert len(live) == 3
    total = 3
    while live:
        actions = s.on_trial_exited(live.pop(0), "completed")
        new = [a.request_id for a in actions if isinstance(a, Create)]
        total += len(new)
        live += new
        assert len(live) <= 3
    assert total == 12 and s.progress() == 1.0


def test_unlimited_concurrency_creates_everything_at_once():
    assert len(make_searcher(config("grid", max_concurrent_trials=0)).initial_actions()) == 12


def test_all_errored_is_a_failure():
    _, shutdowns = run_to_end(make_searcher(config("grid")), outcome="errored")
    assert shutdowns == [Shutdown(failure=True)]


def test_numeric_range_without_count_is_rejected_at_parse():
    with pytest.raises(ConfigError) as e:
        config("grid", hparams={"x": {"type": "double", "minval": 0, "maxval": 1}})
    assert str(e.value) == "hyperparameters.x.count: required by the grid searcher"


def test_snapshot_restore_continues_identically():
    cfg = config("grid", max_concurrent_trials=2)
    straight, _ = run_to_end(make_searcher(cfg))
    s = make_searcher(cfg)
    first = s.initial_actions()
    restored = GridSearcher.restore(cfg, json.loads(json.dumps(s.snapshot())))
    rest, shutdowns = run_to_end(restored, first)
    assert signature(rest) == signature(straight)
    assert shutdowns == [Shutdown(failure=False)]


def test_a_grid_cut_short_by_max_trials_is_told_at_create():
    from controlplane.searchers.grid import subset_warning

    # (searcher fields, warning): the test grid has 12 points
    cases = [
        ({"max_trials": 4}, "searcher.max_trials: 4 is below the grid's 12 points: only the first 4 (in grid order) "
                            "will be trained; raise max_trials to 12 to search the whole grid"),
        ({"max_trials": 12}, None),
        ({"max_trials": 50}, None),
        ({}, None),
    ]
    for fields, warning in cases:
        assert subset_warning(config("grid", **fields)) == warning, fields
    assert subset_warning(config("random", max_trials=4)) is None
