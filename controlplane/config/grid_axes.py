"""How many points a grid search over these hyperparameters has, counted from the definitions alone.

Here, not in ``searchers/``, because the config check needs it (a grid with a numeric range and no
``count`` is refused at submit time) and config sits below the searchers; ``searchers/sampling.py``
builds the points along the same axes.
"""

from __future__ import annotations

from controlplane.config.errors import ConfigError
from controlplane.config.hyperparameters import Categorical, Const, Hparam, IntRange


def flatten(hps: dict[str, Hparam], prefix: str = "") -> list[tuple[str, Hparam]]:
    """Every leaf hyperparameter with its dotted path, in sorted key order (the grid's axis order)."""
    out = []
    for key in sorted(hps):
        hp = hps[key]
        path = f"{prefix}{key}"
        out.extend(flatten(hp, path + ".") if isinstance(hp, dict) else [(path, hp)])
    return out


def axis_length(hp: Hparam, path: str) -> int:
    """How many points the axis of ``hp`` has, without building it."""
    if isinstance(hp, Const):
        return 1
    if isinstance(hp, Categorical):
        return len(hp.vals)
    if isinstance(hp, dict):
        raise TypeError(f"{path} is a group, not an axis")
    if hp.count is None:
        raise ConfigError(f"hyperparameters.{path}.count", "required by the grid searcher")
    if isinstance(hp, IntRange):
        return min(hp.count, hp.maxval - hp.minval + 1)  # no more points than integers in the range
    return hp.count


def grid_size(hps: dict[str, Hparam]) -> int:
    """The number of grid points: the product of the axes' lengths, nothing built.

    Past 10**18 the exact product stops mattering; it is capped there so that thousands of
    huge counts cannot turn into one enormous integer."""
    size = 1
    for path, hp in flatten(hps):
        size = min(size * axis_length(hp, path), 10**18 + 1)
    return size
