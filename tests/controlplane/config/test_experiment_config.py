"""The experiment schema: defaults, Determined's shapes, idempotent to_dict, errors that name field and rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.experiment import parse_experiment_config
from controlplane.config.hyperparameters import Categorical, Const, DoubleRange, IntRange, LogRange
from controlplane.config.yaml_io import load_yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "spirals"
BASE = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss", "max_length": 10}}


def parse(**over) -> dict:
    return parse_experiment_config({**BASE, **over}).to_dict()


def error(**over) -> str:
    with pytest.raises(ConfigError) as e:
        parse_experiment_config({**BASE, **over})
    return str(e.value)


def test_config_error_shape():
    e = ConfigError("a.b", "required")
    assert isinstance(e, ValueError) and (e.path, e.rule, str(e)) == ("a.b", "required", "a.b: required")
    assert str(ConfigError("", "bad")) == "bad"


def test_defaults_are_filled():
    cfg = parse()
    assert cfg["name"] is None and cfg["description"] == "" and cfg["labels"] == []
    assert cfg["max_restarts"] == 5
    assert cfg["searcher"]["max_concurrent_trials"] == 16
    assert cfg["searcher"]["smaller_is_better"] is True
    assert cfg["searcher"]["max_length"] == {"batches": 10}
    assert cfg["resources"] == {"slots_per_trial": 1, "resource_pool": None, "priority": None, "max_slots": None,
                                "weight": 1.0}
    assert cfg["checkpoint_storage"] is None
    assert cfg["environment"] == {"environment_variables": []}
    assert isinstance(cfg["reproducibility"]["experiment_seed"], int)
    json.dumps(cfg)


def test_typed_attributes():
    cfg = parse_experiment_config({**BASE, "searcher": {"name": "random", "metric": "acc", "smaller_is_better": False,
                                                        "max_trials": 3, "max_length": {"epochs": 2}},
                                   "resources": {"slots_per_trial": 2, "resource_pool": "gpu", "priority": 10},
                                   "reproducibility": {"experiment_seed": 9}})
    assert cfg.searcher.name == "random" and cfg.searcher.metric == "acc" and cfg.searcher.smaller_is_better is False
    assert cfg.searcher.max_trials == 3 and cfg.searcher.max_length == 2
    assert cfg.to_dict()["searcher"]["max_length"] == {"epochs": 2}
    assert cfg.resources.slots_per_trial == 2 and cfg.resources.resource_pool == "gpu" and cfg.resources.priority == 10
    assert cfg.reproducibility.experiment_seed == 9 and cfg.entrypoint == "python3 train.py"


def test_max_length_is_optional():
    cfg = parse_experiment_config({**BASE, "searcher": {"name": "single", "metric": "loss"}})
    assert cfg.searcher.max_length is None and cfg.to_dict()["searcher"]["max_length"] is None


def test_unseeded_config_gets_a_seed_that_is_kept():
    cfg = parse()
    assert parse_experiment_config(cfg).to_dict()["reproducibility"] == cfg["reproducibility"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_parse_and_to_dict_is_a_fixed_point(path):
    cfg = parse_experiment_config(load_yaml(path.read_text(), source=path.name)).to_dict()
    assert parse_experiment_config(cfg).to_dict() == cfg
    assert json.loads(json.dumps(cfg)) == cfg


def test_spirals_examples():
    const = parse_experiment_config(load_yaml((EXAMPLES / "const.yaml").read_text()))
    assert const.searcher.name == "single" and const.max_restarts == 2
    assert const.hyperparameters["lr"] == Const(0.05)
    rnd = parse_experiment_config(load_yaml((EXAMPLES / "random.yaml").read_text()))
    assert rnd.searcher.max_trials == 6 and rnd.searcher.max_concurrent_trials == 4
    assert rnd.hyperparameters["lr"] == LogRange(10, -3, -1)
    assert rnd.hyperparameters["hidden"] == Categorical((16, 32, 64))
    assert rnd.reproducibility.experiment_seed == 42


def test_full_config_is_a_fixed_point():
    raw = {**BASE, "name": "e", "description": "d", "labels": ["a"], "entrypoint": ["python3", "train.py"],
           "hyperparameters": {"a": 1, "b": {"type": "int", "minval": 1, "maxval": 4, "count": 2}},
           "resources": {"slots_per_trial": 0, "max_slots": 4, "weight": 2, "shm_size": 1024},
           "checkpoint_storage": {"type": "s3", "bucket": "b", "prefix": "p", "save_trial_best": 3},
           "environment": {"image": "img", "environment_variables": {"cpu": ["A=1"], "cuda": ["B=2"]}},
           "min_validation_period": {"batches": 100}, "min_checkpoint_period": 50,
           "records_per_epoch": 1000, "bind_mounts": [{"host_path": "/a", "container_path": "/b"}],
           "searcher": {"name": "single", "metric": "loss", "max_length": 10, "unit": "batches"}}
    cfg = parse_experiment_config(raw).to_dict()
    assert parse_experiment_config(cfg).to_dict() == cfg
    assert cfg["checkpoint_storage"] == {"type": "s3", "bucket": "b", "prefix": "p", "save_experiment_best": 0,
                                         "save_trial_best": 3, "save_trial_latest": 1}
    assert cfg["min_checkpoint_period"] == {"batches": 50} and cfg["searcher"]["unit"] == "batches"
    assert cfg["resources"]["weight"] == 2.0 and cfg["resources"]["shm_size"] == 1024


def test_hyperparameter_kinds_and_nesting():
    hps = {"a": 1, "b": {"type": "int", "minval": 1, "maxval": 4}, "c": {"type": "log", "minval": -3, "maxval": -1},
           "d": {"type": "categorical", "vals": ["x", "y"]}, "l": [1, 2],
           "opt": {"lr": {"type": "double", "minval": 0, "maxval": 1}, "name": "sgd"}}
    parsed = parse_experiment_config({**BASE, "hyperparameters": hps}).hyperparameters
    assert parsed["a"] == Const(1) and parsed["l"] == Const([1, 2]) and parsed["b"] == IntRange(1, 4)
    assert parsed["opt"] == {"lr": DoubleRange(0, 1), "name": Const("sgd")}
    cfg = parse(hyperparameters=hps)["hyperparameters"]
    assert cfg["a"] == {"type": "const", "val": 1}
    assert cfg["c"] == {"type": "log", "base": 10, "minval": -3, "maxval": -1}
    assert cfg["opt"]["lr"]["type"] == "double"


@pytest.mark.parametrize("over, message", [
    ({"searcher": {"name": "random", "metric": "loss", "max_trials": 0}}, "searcher.max_trials: must be >= 1, got 0"),
    ({"searcher": {"name": "random", "metric": "loss", "max_trials": "abc"}},
     "searcher.max_trials: must be an integer, got 'abc'"),
    ({"searcher": {"name": "random", "metric": "loss"}}, "searcher.max_trials: required"),
    ({"searcher": {"name": "adaptive_asha", "metric": "loss"}}, "searcher.max_trials: required"),
    ({"searcher": {"name": "sync_halving", "metric": "loss"}},
     "searcher.name: unsupported searcher 'sync_halving' (supported: single, grid, random, adaptive_asha, "
     "async_halving)"),
    ({"searcher": {"metric": "loss"}}, "searcher.name: required"),
    ({"searcher": {"name": "single"}}, "searcher.metric: required"),
    ({"searcher": {"name": "single", "metric": "loss", "max_concurrent_trials": -1}},
     "searcher.max_concurrent_trials: must be >= 0, got -1"),
    ({"searcher": {"name": "single", "metric": "loss", "max_length": {"steps": 3}}},
     "searcher.max_length: must be an integer or one of {batches|records|epochs: n}, got {'steps': 3}"),
    ({"searcher": {"name": "single", "metric": "loss", "colour": 1}}, "searcher.colour: unknown field"),
    ({"searcher": None}, "searcher: required"),
    ({"entrypoint": None}, "entrypoint: required"),
    ({"entrypoint": []}, "entrypoint: must be a non-empty string or list of strings, got []"),
    ({"hyperparameters": {"lr": {"type": "double", "minval": 1, "maxval": 0}}},
     "hyperparameters.lr.minval: must be < maxval (0), got 1"),
    ({"hyperparameters": {"lr": {"type": "int", "minval": 1, "maxval": 1}}},
     "hyperparameters.lr.minval: must be < maxval (1), got 1"),
    ({"hyperparameters": {"lr": {"type": "int", "minval": 0.5, "maxval": 1}}},
     "hyperparameters.lr.minval: must be an integer, got 0.5"),
    ({"hyperparameters": {"opt": {"lr": {"type": "double", "maxval": 1}}}}, "hyperparameters.opt.lr.minval: required"),
    ({"hyperparameters": {"lr": {"type": "double", "minval": 0, "maxval": 1, "step": 2}}},
     "hyperparameters.lr.step: unknown field"),
    ({"hyperparameters": {"lr": {"type": "categorical", "vals": []}}},
     "hyperparameters.lr.vals: must be a non-empty list, got []"),
    ({"hyperparameters": {"lr": {"type": "const"}}}, "hyperparameters.lr.val: required"),
    ({"hyperparameters": {"lr": {"type": "uniform"}}},
     "hyperparameters.lr.type: must be one of const, int, double, log, categorical, got 'uniform'"),
    ({"resources": {"priority": 100}}, "resources.priority: must be <= 99, got 100"),
    ({"resources": {"slots_per_trial": -1}}, "resources.slots_per_trial: must be >= 0, got -1"),
    ({"resources": {"weight": 0}}, "resources.weight: must be > 0, got 0"),
    ({"resources": {"max_slots": 0}}, "resources.max_slots: must be >= 1, got 0"),
    ({"max_restarts": "x"}, "max_restarts: must be an integer, got 'x'"),
    ({"max_restarts": -1}, "max_restarts: must be >= 0, got -1"),
    ({"colour": "blue"}, "colour: unknown field"),
    ({"checkpoint_policy": "sometimes"}, "checkpoint_policy: must be one of best, all, none, got 'sometimes'"),
    ({"labels": "a"}, "labels: must be a list of strings, got 'a'"),
    ({"reproducibility": {"experiment_seed": -1}}, "reproducibility.experiment_seed: must be >= 0, got -1"),
    ({"checkpoint_storage": {"type": "shared_fs"}}, "checkpoint_storage.host_path: required"),
    ({"checkpoint_storage": {"type": "s3"}}, "checkpoint_storage.bucket: required"),
    ({"checkpoint_storage": {"type": "azure"}},
     "checkpoint_storage.type: must be one of shared_fs, s3, gcs, directory, got 'azure'"),
    ({"checkpoint_storage": {"type": "gcs", "bucket": "b", "save_trial_best": -1}},
     "checkpoint_storage.save_trial_best: must be >= 0, got -1"),
    ({"environment": {"environment_variables": ["NOEQUALS"]}},
     "environment.environment_variables: must be a list of \"NAME=value\" strings, got ['NOEQUALS']"),
    ({"min_validation_period": {"weeks": 1}},
     "min_validation_period: must be an integer or one of {batches|records|epochs: n}, got {'weeks': 1}"),
    ({"searcher": {"name": "grid", "metric": "l", "max_length": 1},
      "hyperparameters": {"x": {"type": "int", "minval": 0, "maxval": 3}}},
     "hyperparameters.x.count: required by the grid searcher"),
])
def test_errors_name_the_field_and_the_rule(over, message):
    assert error(**over) == message


def test_preemption_timeout_is_determineds_seconds_checked_and_read():
    from controlplane.config.experiment import preemption_timeout_s

    cfg = parse(preemption_timeout=120)
    assert cfg["preemption_timeout"] == 120 and preemption_timeout_s(cfg) == 120
    assert preemption_timeout_s(parse()) is None and preemption_timeout_s(parse(preemption_timeout=None)) is None
    assert error(preemption_timeout="1h") == "preemption_timeout: must be an integer, got '1h'"
    assert error(preemption_timeout=-1) == "preemption_timeout: must be >= 0, got -1"
    assert error(preemption_timeout=2**31) == f"preemption_timeout: must be <= {2**31 - 1}, got {2**31}"
    assert error(preemption_timout=60) == "preemption_timout: unknown field"  # a typo is still refused


def test_checkpoint_policy_is_kept_for_the_trial_api():
    assert parse(checkpoint_policy="all")["checkpoint_policy"] == "all"


def test_determined_keys_are_kept():
    keep = {"records_per_epoch": 100, "bind_mounts": [], "data": {"x": 1}, "debug": False, "optimizations": {},
            "profiling": {"enabled": False}, "scheduling_unit": 10, "workspace": "w", "project": "p",
            "perform_initial_validation": True, "log_policies": [], "integrations": {}, "preemption_timeout": 60,
            "internal": None}
    cfg = parse(**keep, environment={"image": "x", "environment_variables": ["A=1"], "pod_spec": {"a": 1}})
    for key, value in keep.items():
        assert cfg[key] == value
    assert cfg["environment"] == {"environment_variables": ["A=1"], "image": "x", "pod_spec": {"a": 1}}


def test_every_mistake_of_a_config_is_reported_at_once():
    """Two typos in two parts and a bad value in a third: one answer names all three."""
    raw = {**BASE, "searcher": {**BASE["searcher"], "max_lenght": {"batches": 10}},
           "resources": {"slots_per_trail": 2}, "max_restarts": -1, "bogus": 1}
    with pytest.raises(ConfigError) as e:
        parse_experiment_config(raw)
    assert {(x.path, x.rule) for x in e.value.errors} == {
        ("searcher.max_lenght", "unknown field"), ("resources.slots_per_trail", "unknown field"),
        ("max_restarts", "must be >= 0, got -1"), ("bogus", "unknown field")}
    assert str(e.value).count("\n") == 3  # one line each
