"""Hostile configs are refused with the field and the rule: alias bombs, deep nesting, huge or
non-finite numbers, values JSON cannot carry. Nothing here may raise anything but ConfigError."""

from __future__ import annotations

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.experiment import parse_experiment_config
from controlplane.config.limits import Limits, check_plain
from controlplane.config.yaml_io import apply_overrides, load_yaml

BASE = ("entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n")

# The 508-byte bomb shape: nine levels of nine aliases under a passthrough key (9**9 strings).
ALIAS_BOMB = "data:\n" + "".join(
    f"  {chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9 if i else ['"lol"'] * 9) + "]\n"
    for i in range(9)) + BASE


def test_alias_bomb_is_refused_by_its_expanded_size():
    assert len(ALIAS_BOMB) < 600
    with pytest.raises(ConfigError, match="YAML aliases expanded.*over the (1048576-byte limit|limit of 50000)"):
        load_yaml(ALIAS_BOMB)


def test_a_few_honest_aliases_still_load():
    text = BASE + "data:\n  common: &c {lr: 0.1, batch: 32}\n  a: *c\n  b:\n    <<: *c\n    lr: 0.2\n"
    data = load_yaml(text)
    assert data["data"]["a"] == {"lr": 0.1, "batch": 32}
    assert data["data"]["b"] == {"lr": 0.2, "batch": 32}


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(ConfigError, match="alias refers to a mapping or list that contains it"):
        load_yaml("a: &x [1, *x]\n")


@pytest.mark.parametrize("text", [
    "a: " + "[" * 10_000 + "]" * 10_000,  # flow style
    "a: " + "{b: " * 10_000 + "1" + "}" * 10_000,
    "a:\n" + "".join(" " * i + "-\n" for i in range(1, 200)),  # block style
])
def test_deep_yaml_is_refused_without_recursion_error(text):
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        load_yaml(text)


def test_deep_dict_is_refused_without_recursion_error():
    deep: dict = {}
    node = deep
    for _ in range(10_000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        check_plain({"data": deep}, Limits())
    parse_failure = pytest.raises(ConfigError)  # without limits it still walks iteratively
    with parse_failure:
        parse_experiment_config({"entrypoint": "x", "searcher": {"name": "single", "metric": "m"},
                                 "data": deep, "labels": 5})


def test_size_cap_applies_to_the_text():
    with pytest.raises(ConfigError, match="over the 1000-byte limit"):
        load_yaml(BASE + "description: " + "x" * 2000 + "\n", limits=Limits(max_bytes=1000))


@pytest.mark.parametrize(("snippet", "path", "rule"), [
    ("max_restarts: 1180591620717411303424", "max_restarts", "64 bits"),
    ("data: {n: 1180591620717411303424}", "data.n", "64 bits"),
    ("resources: {weight: .nan}", "resources.weight", "finite"),
    ("resources: {weight: .inf}", "resources.weight", "finite"),
    ("hyperparameters: {x: -.inf}", "hyperparameters.x", "finite"),
    ("data: {when: 2024-01-01}", "data.when", "quote the value"),
    ("data: {1: one}", "data.1", "keys must be strings"),
    ("data: [1, {x: !!binary aGk=}]", "data[1].x", "got bytes"),
    ("resources: {max_slots: 4294967296}", "resources.max_slots", "must be <= 2147483647"),
    ("description: \"a\\0b\"", "description", "NUL"),
])
def test_values_json_cannot_carry_are_named(snippet, path, rule):
    with pytest.raises(ConfigError) as e:
        parse_experiment_config(load_yaml(BASE + snippet + "\n"))
    assert e.value.path == path
    assert rule in e.value.rule


def test_json_configs_are_held_to_the_same_rules():
    raw = {"entrypoint": "x", "searcher": {"name": "single", "metric": "m"}, "resources": {"weight": float("nan")}}
    with pytest.raises(ConfigError, match="resources.weight: must be a finite number"):
        parse_experiment_config(raw)
    raw = {"entrypoint": "x", "searcher": {"name": "single", "metric": "m"}, "max_restarts": 2**70}
    with pytest.raises(ConfigError, match="max_restarts: integer out of range"):
        parse_experiment_config(raw)


@pytest.mark.parametrize(("hp", "path"), [
    ({"type": "log", "base": 10, "minval": -3, "maxval": 400}, "hyperparameters.x.maxval"),
    ({"type": "double", "minval": -1e308, "maxval": 1e308}, "hyperparameters.x"),
])
def test_hyperparameters_every_trial_would_fail_on_are_refused(hp, path):
    with pytest.raises(ConfigError) as e:
        parse_experiment_config({"entrypoint": "x", "searcher": {"name": "random", "metric": "m", "max_trials": 2},
                                 "hyperparameters": {"x": hp}})
    assert e.value.path == path


def test_overrides_are_bounded_too():
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        apply_overrides({}, ["data=" + "[" * 1000 + "]" * 1000])
    with pytest.raises(ConfigError, match="64 bits"):
        apply_overrides({}, ["data=1180591620717411303424"])
