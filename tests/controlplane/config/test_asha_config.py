"""adaptive_asha and async_halving: Determined's fields, defaults and errors naming the field."""

from __future__ import annotations

import json

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.experiment import parse_experiment_config

BASE = {"entrypoint": "python3 train.py"}


def searcher(**fields) -> dict:
    return parse_experiment_config({**BASE, "searcher": fields}).to_dict()["searcher"]


def error(**fields) -> str:
    with pytest.raises(ConfigError) as e:
        parse_experiment_config({**BASE, "searcher": fields})
    return str(e.value)


def test_adaptive_asha_defaults_are_determined_s():
    s = searcher(name="adaptive_asha", metric="loss", max_trials=16, time_metric="batches", max_time=100)
    assert s == {"name": "adaptive_asha", "metric": "loss", "smaller_is_better": True, "max_trials": 16,
                 "max_concurrent_trials": 16, "max_length": None, "source_trial_id": None,
                 "source_checkpoint_uuid": None, "time_metric": "batches", "max_time": 100, "divisor": 4.0,
                 "stop_once": None, "max_rungs": 5, "mode": "standard", "bracket_rungs": []}


def test_async_halving_defaults_are_determined_s():
    s = searcher(name="async_halving", metric="acc", smaller_is_better=False, max_trials=8, num_rungs=3,
                 max_length={"epochs": 9})
    assert s["num_rungs"] == 3 and s["divisor"] == 4.0 and s["max_concurrent_trials"] == 16
    assert s["max_length"] == {"epochs": 9} and s["time_metric"] is None and s["max_time"] is None
    assert s["smaller_is_better"] is False and "mode" not in s and "max_rungs" not in s


def test_every_field_is_kept_and_to_dict_is_a_fixed_point():
    raw = {**BASE, "searcher": {"name": "adaptive_asha", "metric": "val_loss", "smaller_is_better": True,
                                "max_trials": 100, "max_rungs": 4, "divisor": 3, "mode": "conservative",
                                "max_concurrent_trials": 0, "time_metric": "epochs", "max_time": 27,
                                "bracket_rungs": [3, 1], "stop_once": True, "max_length": {"batches": 5}}}
    cfg = parse_experiment_config(raw)
    s = cfg.searcher
    assert (s.max_rungs, s.divisor, s.mode, s.max_concurrent_trials, s.bracket_rungs, s.stop_once) == \
        (4, 3.0, "conservative", 0, [3, 1], True)
    assert s.length() == (27, "epochs")  # max_time wins over the older max_length, as in Determined
    out = cfg.to_dict()
    assert parse_experiment_config(out).to_dict() == out
    assert json.loads(json.dumps(out)) == out


def test_the_older_max_length_alone_is_accepted():
    cfg = parse_experiment_config({**BASE, "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 4,
                                                        "max_length": {"batches": 64}}})
    assert cfg.searcher.length() == (64, "batches")
    cfg = parse_experiment_config({**BASE, "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 4,
                                                        "max_length": 32}})
    assert cfg.searcher.length() == (32, "batches")


ASHA = {"name": "adaptive_asha", "metric": "loss", "max_trials": 4, "time_metric": "batches", "max_time": 64}
HALVING = {"name": "async_halving", "metric": "loss", "max_trials": 4, "num_rungs": 2, "max_length": 64}


@pytest.mark.parametrize("fields, message", [
    ({**ASHA, "max_trials": None}, "searcher.max_trials: required"),
    ({**ASHA, "max_trials": 0}, "searcher.max_trials: must be >= 1, got 0"),
    ({**ASHA, "time_metric": None, "max_time": None},
     "searcher.max_time: required (with time_metric; or the older max_length) by the adaptive_asha searcher"),
    ({**ASHA, "time_metric": None},
     "searcher.time_metric: required with max_time (the validation metric max_time counts, e.g. batches), "
     "for the adaptive_asha searcher"),
    ({**ASHA, "max_time": None}, "searcher.max_time: required with time_metric, for the adaptive_asha searcher"),
    ({**ASHA, "max_time": 0}, "searcher.max_time: must be >= 1, got 0"),
    ({**ASHA, "time_metric": 3}, "searcher.time_metric: must be a string, got 3"),
    ({**ASHA, "time_metric": None, "max_time": None, "max_length": 0},
     "searcher.max_length: must be > 0 for the adaptive_asha searcher"),
    ({**ASHA, "divisor": 1}, "searcher.divisor: must be > 1, got 1"),
    ({**ASHA, "divisor": "4"}, "searcher.divisor: must be a number, got '4'"),
    ({**ASHA, "mode": "reckless"},
     "searcher.mode: must be one of aggressive, standard, conservative, got 'reckless'"),
    ({**ASHA, "max_rungs": 0}, "searcher.max_rungs: must be >= 1, got 0"),
    ({**ASHA, "bracket_rungs": 3}, "searcher.bracket_rungs: must be a list of integers, got 3"),
    ({**ASHA, "bracket_rungs": [2, 0]}, "searcher.bracket_rungs[1]: must be >= 1, got 0"),
    ({**ASHA, "stop_once": "yes"}, "searcher.stop_once: must be true or false, got 'yes'"),
    ({**ASHA, "max_concurrent_trials": -1}, "searcher.max_concurrent_trials: must be >= 0, got -1"),
    ({**ASHA, "num_rungs": 3}, "searcher.num_rungs: unknown field"),
    ({**HALVING, "num_rungs": None}, "searcher.num_rungs: required"),
    ({**HALVING, "num_rungs": 0}, "searcher.num_rungs: must be >= 1, got 0"),
    ({**HALVING, "mode": "standard"}, "searcher.mode: unknown field"),
    ({**HALVING, "max_length": None}, "searcher.max_time: required (with time_metric; or the older max_length) "
                                      "by the async_halving searcher"),
    ({"name": "random", "metric": "loss", "max_trials": 2, "divisor": 4}, "searcher.divisor: unknown field"),
])
def test_errors_name_the_field_and_the_rule(fields, message):
    assert error(**fields) == message
