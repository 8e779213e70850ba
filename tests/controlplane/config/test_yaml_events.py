"""The bounded event pass: a config past a limit is refused after reading only up to that limit,
hyperparameters are counted exactly as the loaded config's are (so one at the limit loads), and
values and keys are capped, aliases expanded."""

from __future__ import annotations

import pytest
import yaml

from controlplane.config import yaml_events
from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain, hyperparameter_count
from controlplane.config.yaml_io import load_yaml

BASE = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
LIMITS = Limits(max_hyperparameters=1000)


def huge(n: int) -> str:
    return BASE + "hyperparameters:\n" + "".join(
        f"  h{i}: {{type: int, minval: 1, maxval: 10}}\n" if i % 20 == 0 else f"  h{i}: {i}\n" for i in range(n))


@pytest.fixture
def events_read(monkeypatch) -> list[int]:
    """How many events the pass took from the parser."""
    count = [0]
    parse = yaml.parse

    def counting(*args, **kwargs):
        for event in parse(*args, **kwargs):
            count[0] += 1
            yield event

    monkeypatch.setattr(yaml_events.yaml, "parse", counting)
    return count


def test_sixty_thousand_hyperparameters_stop_the_reader_at_the_limit(events_read):
    text = huge(60_000)
    total = sum(1 for _ in yaml.parse(text, Loader=yaml_events.LOADER))
    events_read[0] = 0
    with pytest.raises(ConfigError) as e:
        load_yaml(text, limits=LIMITS)
    assert e.value.path == "hyperparameters"
    assert "more than 1000 hyperparameters, over the limit of 1000" in str(e.value)
    assert "line 1004" in str(e.value)  # h1000, the 1,001st: three lines above h0
    assert events_read[0] < total / 30, (events_read[0], total)


def test_the_reader_stops_before_a_syntax_error_further_on():
    with pytest.raises(ConfigError, match="over the limit of 1000"):
        load_yaml(huge(2000) + "broken: [\n", limits=LIMITS)


@pytest.mark.parametrize("leaf", [
    "{type: int, minval: 1, maxval: 10}",
    "{minval: 1, maxval: 10, count: 3, type: int}",  # `type` last: still one hyperparameter
    "{type: categorical, vals: [1, 2, 3, 4, 5, 6, 7, 8]}",
])
def test_exactly_the_limit_loads_whatever_the_order_of_keys(leaf):
    groups = "".join(f"  g{g}:\n" + "".join(f"    h{i}: {leaf}\n" for i in range(100)) for g in range(9))
    text = BASE + "hyperparameters:\n" + groups + "".join(f"  x{i}: {leaf}\n" for i in range(100))
    loaded = load_yaml(text, limits=LIMITS)
    assert hyperparameter_count(loaded["hyperparameters"]) == 1000
    with pytest.raises(ConfigError, match="over the limit of 1000"):
        load_yaml(text + "  one_more: 1\n", limits=LIMITS)


def test_a_group_over_the_limit_is_counted_when_it_ends():
    text = BASE + "hyperparameters:\n  group:\n" + "".join(f"    h{i}: 1\n" for i in range(1001))
    with pytest.raises(ConfigError, match="over the limit of 1000"):
        load_yaml(text, limits=LIMITS)


def test_hyperparameters_elsewhere_are_not_counted():
    text = BASE + "data:\n  hyperparameters:\n" + "".join(f"    h{i}: 1\n" for i in range(1001))
    assert len(load_yaml(text, limits=LIMITS)["data"]["hyperparameters"]) == 1001


def test_values_and_keys_are_capped_while_reading(events_read):
    text = "data: [" + ", ".join(["1"] * 5000) + "]\n"
    with pytest.raises(ConfigError, match="more than 1000 values and keys, over the limit of 1000"):
        load_yaml(text, limits=Limits(max_nodes=1000))
    assert events_read[0] < 1100
    aliased = "a: &a [" + ", ".join(["1"] * 100) + "]\nb: [" + ", ".join(["*a"] * 20) + "]\n"
    with pytest.raises(ConfigError, match="with its YAML aliases expanded, more than 1000 values"):
        load_yaml(aliased, limits=Limits(max_nodes=1000))


def test_a_json_config_is_counted_before_it_is_walked():
    hps = {f"h{i}": i for i in range(60_000)}
    assert hyperparameter_count(hps, stop_after=1000) == 1001
    with pytest.raises(ConfigError) as e:
        check_plain({"entrypoint": "x", "hyperparameters": hps}, LIMITS)
    assert e.value.path == "hyperparameters" and "over the limit of 1000" in str(e.value)
    with pytest.raises(ConfigError, match="more than 1000 values and keys"):
        check_plain({"data": list(range(5000))}, Limits(max_nodes=1000))


def test_an_aliased_group_counts_all_its_hyperparameters():
    group = "{" + ", ".join(f"h{i}: 1" for i in range(600)) + "}"
    text = BASE + f"data: &grp {group}\nhyperparameters:\n  a: *grp\n"
    assert hyperparameter_count(load_yaml(text, limits=LIMITS)["hyperparameters"]) == 600
    with pytest.raises(ConfigError, match="over the limit of 1000"):
        load_yaml(text + "  b: *grp\n", limits=LIMITS)
