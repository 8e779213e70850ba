"""The experiment schema: defaults, Determined's shapes, and errors that name field and rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.experiment import parse_experiment_config
from controlplane.config.yaml_io import apply_overrides, load_yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "spirals"
BASE = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss", "max_length": 10}}


def parse(**over) -> dict:  # noqa: ANN003
    return parse_experiment_config({**BASE, **over}).to_dict()


def error(**over) -> str:  # noqa: ANN003
    with pytest.raises(ConfigError) as e:
        parse_experiment_config({**BASE, **over})
    return str(e.value)


def test_defaults_are_filled():
    cfg = parse()
    assert cfg["max_restarts"] == 5
    assert cfg["searcher"]["max_concurrent_trials"] == 16
    assert cfg["searcher"]["smaller_is_better"] is True
    assert cfg["searcher"]["max_length"] == {"batches": 10}
    assert cfg["resources"]["slots_per_trial"] == 1
    assert isinstance(cfg["reproducibility"]["experiment_seed"], int)


def test_to_dict_is_a_fixed_point():
    for path in EXAMPLES.glob("*.yaml"):
        cfg = parse_experiment_config(load_yaml(path.read_text())).to_dict()
        assert parse_experiment_config(cfg).to_dict() == cfg, path


def test_hyperparameter_kinds_and_nesting():
    hps = {"a": 1, "b": {"type": "int", "minval": 1, "maxval": 4}, "c": {"type": "log", "minval": -3, "maxval": -1},
           "d": {"type": "categorical", "vals": ["x", "y"]}, "opt": {"lr": {"type": "double", "minval": 0, "maxval": 1}}}
    cfg = parse(hyperparameters=hps)["hyperparameters"]
    assert cfg["a"] == {"type": "const", "val": 1}
    assert cfg["c"]["base"] == 10
    assert cfg["opt"]["lr"]["type"] == "double"


@pytest.mark.parametrize("over, message", [
    ({"searcher": {"name": "random", "metric": "loss", "max_trials": 0}}, "searcher.max_trials: must be >= 1, got 0"),
    ({"searcher": {"name": "random", "metric": "loss"}}, "searcher.max_trials: required"),
    ({"searcher": {"name": "adaptive_asha", "metric": "loss"}},
     "searcher.name: unsupported searcher 'adaptive_asha' (supported: single, grid, random)"),
    ({"entrypoint": None}, "entrypoint: required"),
    ({"hyperparameters": {"lr": {"type": "double", "minval": 1, "maxval": 0}}},
     "hyperparameters.lr.minval: must be <= maxval (0), got 1"),
    ({"hyperparameters": {"lr": {"type": "uniform"}}}, "hyperparameters.lr.type: must be one of"),
    ({"resources": {"priority": 100}}, "resources.priority: must be <= 99, got 100"),
    ({"max_restarts": "x"}, "max_restarts: must be an integer, got 'x'"),
    ({"colour": "blue"}, "colour: unknown field"),
    ({"checkpoint_storage": {"type": "shared_fs"}}, "checkpoint_storage.host_path: required"),
    ({"searcher": {"name": "grid", "metric": "l", "max_length": 1},
      "hyperparameters": {"x": {"type": "int", "minval": 0, "maxval": 3}}}, "hyperparameters.x.count: required"),
])
def test_errors_name_the_field_and_the_rule(over, message):
    assert message in error(**over)


def test_determined_keys_are_kept():
    cfg = parse(records_per_epoch=100, bind_mounts=[], environment={"image": "x", "environment_variables": ["A=1"]})
    assert cfg["records_per_epoch"] == 100
    assert cfg["environment"]["image"] == "x"


def test_yaml_errors_give_the_line():
    with pytest.raises(ConfigError, match="line 3, column"):
        load_yaml("name: x\nsearcher:\n  name: a: b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml("- a\n- b\n")


def test_overrides():
    cfg = apply_overrides({"searcher": {"max_trials": 2}}, ["searcher.max_trials=4", "resources.slots_per_trial=2"])
    assert cfg == {"searcher": {"max_trials": 4}, "resources": {"slots_per_trial": 2}}
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, ["nonsense"])
