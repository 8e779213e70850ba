"""JSON cannot carry NaN or ±Inf: they travel and are stored as the strings Determined uses."""

from __future__ import annotations

import math
from typing import Any

_TO_STR = {math.inf: "Infinity", -math.inf: "-Infinity"}
_FROM_STR = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_nonfinite(value: Any) -> Any:
    """Replace non-finite floats, at any depth, by "NaN", "Infinity" or "-Infinity"."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return _TO_STR.get(value, value)
    if isinstance(value, dict):
        return {k: encode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_nonfinite(v) for v in value]
    return value


def decode_nonfinite(value: Any) -> Any:
    """The inverse of :func:`encode_nonfinite` (only the three exact strings are converted)."""
    if isinstance(value, str):
        return _FROM_STR.get(value, value)
    if isinstance(value, dict):
        return {k: decode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_nonfinite(v) for v in value]
    return value
