"""The experiment config as Determined's own harness reads it (trial.json's ``config``).

Determined's master hands a task its config with every default filled in, and the 0.38.1 harness
indexes it without ``.get``: ``config["optimizations"]["aggregation_frequency"]``,
``config["min_checkpoint_period"]``, ``config["profiling"]["enabled"]`` and so on. The stored config
keeps what the user wrote plus this platform's defaults; this fills, under it, the keys and
defaults Determined's ``expconf`` gives (the stored config wins, maps merge, an explicit ``null``
where Determined has a map becomes that map). Pure: no database, no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

# Determined 0.38.1's expconf defaults for the keys its harness, Trial API and core API read.
DETERMINED_DEFAULTS: dict[str, Any] = {
    "checkpoint_policy": "best",
    "data": {},
    "debug": False,
    "bind_mounts": [],
    "max_restarts": 5,
    "min_checkpoint_period": {"batches": 0},  # 0: never, as Determined reads it
    "min_validation_period": {"batches": 0},
    "perform_initial_validation": False,
    "records_per_epoch": 0,
    "scheduling_unit": 100,
    "optimizations": {
        "aggregation_frequency": 1,
        "average_aggregated_gradients": True,
        "average_training_metrics": True,
        "gradient_compression": False,
        "grad_updates_size_file": None,
        "mixed_precision": "O0",
        "tensor_fusion_threshold": 64,
        "tensor_fusion_cycle_time": 1,
        "auto_tune_tensor_fusion": False,
    },
    "profiling": {"enabled": False, "begin_on_batch": 0, "end_after_batch": None, "sync_timings": True},
    "resources": {"slots_per_trial": 1, "native_parallel": False, "shm_size": None, "devices": []},
}


# A length (one of batches/records/epochs) is whole: filling {"batches": 0} into {"epochs": 1}
# would name two units, which Determined refuses.
_WHOLE = frozenset({"min_checkpoint_period", "min_validation_period"})


def _fill(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    out = dict(config)
    for key, default in defaults.items():
        have = out.get(key)
        if key not in out or (have is None and isinstance(default, dict)):
            out[key] = copy.deepcopy(default)
        elif isinstance(have, dict) and isinstance(default, dict) and key not in _WHOLE:
            out[key] = _fill(have, default)
    return out


def harness_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with Determined's defaults filled in where it says nothing (a new dict)."""
    return _fill(config, DETERMINED_DEFAULTS)
