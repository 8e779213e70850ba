"""single, grid and random: reproducible from the seed, concurrency-limited, restorable."""

from __future__ import annotations

from controlplane.config.experiment import parse_experiment_config
from controlplane.searchers import Create, Shutdown, make_searcher


def config(name: str, seed: int = 1, **searcher) -> object:  # noqa: ANN003
    hps = {"lr": {"type": "log", "minval": -3, "maxval": -1, "count": 3},
           "units": {"type": "int", "minval": 8, "maxval": 64, "count": 2},
           "act": {"type": "categorical", "vals": ["relu", "tanh"]}, "opt": {"momentum": 0.9}}
    return parse_experiment_config({"entrypoint": "x", "hyperparameters": hps,
                                    "searcher": {"name": name, "metric": "loss", "max_length": 5, **searcher},
                                    "reproducibility": {"experiment_seed": seed}})


def run_to_end(searcher, pending: list | None = None) -> list[Create]:  # noqa: ANN001
    """Completes every trial the searcher creates, starting from its initial actions."""
    created, pending = [], list(searcher.initial_actions() if pending is None else pending)
    while pending:
        action = pending.pop(0)
        if isinstance(action, Create):
            created.append(action)
            pending.extend(searcher.on_trial_exited(action.request_id, "completed"))
    return created


def test_random_is_reproducible_from_the_seed():
    a = run_to_end(make_searcher(config("random", seed=3, max_trials=5)))
    b = run_to_end(make_searcher(config("random", seed=3, max_trials=5)))
    c = run_to_end(make_searcher(config("random", seed=4, max_trials=5)))
    assert [(x.hparams, x.seed) for x in a] == [(x.hparams, x.seed) for x in b]
    assert [x.hparams for x in a] != [x.hparams for x in c]
    assert all(1e-3 <= x.hparams["lr"] <= 1e-1 and 8 <= x.hparams["units"] <= 64 for x in a)
    assert a[0].hparams["opt"] == {"momentum": 0.9}


def test_concurrency_limit_and_shutdown():
    s = make_searcher(config("random", max_trials=5, max_concurrent_trials=2))
    live = [a.request_id for a in s.initial_actions()]
    assert len(live) == 2
    created, shutdown = 2, []
    while live:
        actions = s.on_trial_exited(live.pop(0), "completed")
        new = [a.request_id for a in actions if isinstance(a, Create)]
        created += len(new)
        live += new
        shutdown += [a for a in actions if isinstance(a, Shutdown)]
        assert len(live) <= 2
    assert created == 5 and shutdown == [Shutdown(failure=False)] and s.progress() == 1.0


def test_all_errored_shuts_down_with_failure():
    s = make_searcher(config("single"))
    (create,) = s.initial_actions()
    assert s.on_trial_exited(create.request_id, "errored") == [Shutdown(failure=True)]


def test_grid_covers_every_combination():
    created = run_to_end(make_searcher(config("grid")))
    assert len(created) == 3 * 2 * 2
    assert {x.hparams["units"] for x in created} == {8, 64}
    assert len({(x.hparams["lr"], x.hparams["units"], x.hparams["act"]) for x in created}) == 12


def test_single_uses_the_center():
    (create,) = make_searcher(config("single")).initial_actions()
    assert create.hparams["units"] == 36 and create.hparams["act"] == "relu"
    assert abs(create.hparams["lr"] - 1e-2) < 1e-12


def test_snapshot_restore_continues_identically():
    cfg = config("random", max_trials=6, max_concurrent_trials=1)
    straight = run_to_end(make_searcher(cfg))
    s = make_searcher(cfg)
    (first,) = s.initial_actions()
    restored = type(s).restore(cfg, s.snapshot())
    resumed = [first] + run_to_end(restored, restored.on_trial_exited(first.request_id, "completed"))
    assert [(x.request_id, x.hparams, x.seed) for x in resumed] == [(x.request_id, x.hparams, x.seed) for x in straight]

