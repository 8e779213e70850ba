"""YAML loading and `--config a.b=value` overrides: errors carry the line or name the override."""

from __future__ import annotations

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.yaml_io import apply_overrides, load_yaml


def test_loads_a_mapping():
    assert load_yaml("name: x\nsearcher:\n  name: single\n") == {"name": "x", "searcher": {"name": "single"}}
    assert load_yaml("") == {}


def test_syntax_error_gives_the_line_and_column():
    with pytest.raises(ConfigError) as e:
        load_yaml("name: x\nsearcher:\n  name: a: b\n", source="exp.yaml")
    assert e.value.path == ""
    assert str(e.value).startswith("exp.yaml: YAML syntax error at line 3, column ")
    with pytest.raises(ConfigError, match="line 2, column"):
        load_yaml("a: [1, 2\nb: 3\n")


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_yaml("just a string")


def test_overrides_parse_scalars_and_create_nested_dicts():
    base = {"searcher": {"max_trials": 2}}
    cfg = apply_overrides(base, ["searcher.max_trials=4", "resources.slots_per_trial=2", "description=hi there",
                                 "searcher.smaller_is_better=false", "hyperparameters.lr=0.5", "labels=[a, b]"])
    assert cfg == {"searcher": {"max_trials": 4, "smaller_is_better": False},
                   "resources": {"slots_per_trial": 2}, "description": "hi there",
                   "hyperparameters": {"lr": 0.5}, "labels": ["a", "b"]}
    assert base == {"searcher": {"max_trials": 2}}  # the input is not changed


def test_override_value_may_contain_equals():
    assert apply_overrides({}, ["entrypoint=python3 train.py --x=1"]) == {"entrypoint": "python3 train.py --x=1"}


@pytest.mark.parametrize("bad", ["nonsense", "=3", "a..b=1", ".a=1"])
def test_malformed_override_is_named(bad):
    with pytest.raises(ConfigError) as e:
        apply_overrides({}, [bad])
    assert repr(bad) in str(e.value) and "key.path=value" in str(e.value)


def test_override_through_a_scalar_is_an_error():
    with pytest.raises(ConfigError, match="searcher: is not a mapping"):
        apply_overrides({"searcher": "single"}, ["searcher.name=grid"])
