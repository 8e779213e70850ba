"""A grid's size is computed from its axes, never by building it; points are built one by index."""

from __future__ import annotations

import itertools
import tracemalloc

import pytest

from controlplane.config.errors import ConfigError
from controlplane.config.grid_axes import flatten, grid_size
from controlplane.config.hyperparameters import parse_hyperparameters
from controlplane.searchers.sampling import Grid, _axis

HPS = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1, "count": 4},
    "units": {"type": "int", "minval": 8, "maxval": 10, "count": 50},  # clamped to the 3 integers
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "opt": {"momentum": {"type": "double", "minval": 0.1, "maxval": 0.9, "count": 2}, "name": "sgd"},
}


def test_size_is_the_product_of_axis_lengths_nested_groups_included():
    hps = parse_hyperparameters(HPS)
    assert grid_size(hps) == 4 * 3 * 2 * 2 * 1
    assert len(Grid(hps)) == grid_size(hps)


def test_points_by_index_are_the_cartesian_product_in_order():
    hps = parse_hyperparameters(HPS)
    flat = flatten(hps)
    expected = list(itertools.product(*[_axis(hp, path) for path, hp in flat]))
    g = Grid(hps)
    got = [g.point(i) for i in range(len(g))]
    assert [(p["act"], p["lr"], p["opt"]["momentum"], p["opt"]["name"], p["units"]) for p in got] == expected
    assert len({repr(p) for p in got}) == len(got)
    with pytest.raises(IndexError):
        g.point(len(g))


def test_int_axis_never_has_more_points_than_integers():
    hps = parse_hyperparameters({"k": {"type": "int", "minval": 1, "maxval": 4, "count": 1000}})
    assert grid_size(hps) == 4
    assert [Grid(hps).point(i)["k"] for i in range(4)] == [1, 2, 3, 4]


def test_ten_million_point_grid_is_sized_without_building_it():
    hps = parse_hyperparameters({f"h{i}": {"type": "int", "minval": 0, "maxval": 9, "count": 10} for i in range(7)})
    tracemalloc.start()
    try:
        assert grid_size(hps) == 10**7
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_absurd_counts_are_capped_not_multiplied_out():
    hps = parse_hyperparameters({f"h{i}": {"type": "double", "minval": 0, "maxval": 1, "count": 2**62}
                                 for i in range(5000)})
    assert grid_size(hps) == 10**18 + 1


def test_a_range_without_count_is_named():
    with pytest.raises(ConfigError) as e:
        grid_size(parse_hyperparameters({"g": {"x": {"type": "double", "minval": 0, "maxval": 1}}}))
    assert e.value.path == "hyperparameters.g.x.count"
