"""Typed views of a stored experiment config: what the master, the web UI, the CLI and the harness
read of the dict an experiment keeps, with each default in this one place.

The stored config was validated when the experiment was created (``experiment.py``), so a view
does not validate again: it reads a few keys, tolerating a missing or malformed section as its
defaults (a config written by an older master, an API answer the CLI got). Pure and cheap; the
full parse stays where a config is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _section(config: Any, key: str) -> dict[str, Any]:
    inner = config.get(key) if isinstance(config, dict) else None
    return inner if isinstance(inner, dict) else {}


@dataclass(frozen=True)
class SearcherView:
    """``searcher``: its name, the metric that ranks trials and checkpoints, and the warm start."""

    name: str = ""
    metric: str = ""
    smaller_is_better: bool = True
    source_checkpoint_uuid: str | None = None
    source_trial_id: int | None = None
    time_metric: str = ""  # ASHA's rung unit when given (searchers/asha.time_unit reads the rest)
    max_length: Any = None

    @property
    def time_unit(self) -> str:
        """The validation metric an ASHA rung is measured in: ``time_metric``, else the older
        ``max_length``'s unit, else batches."""
        if self.time_metric:
            return self.time_metric
        if isinstance(self.max_length, dict) and len(self.max_length) == 1:
            return str(next(iter(self.max_length)))
        return "batches"

    @property
    def sign(self) -> float:
        """Multiplies a metric so that smaller is better."""
        return 1.0 if self.smaller_is_better else -1.0

    def best(self, values: list[float]) -> float | None:
        """The best of ``values`` by this searcher's direction, None for none."""
        if not values:
            return None
        return min(values) if self.smaller_is_better else max(values)


def searcher_of(config: Any) -> SearcherView:
    """The view of a whole config's ``searcher``."""
    return searcher_from(_section(config, "searcher"))


def searcher_from(s: Any) -> SearcherView:
    """The view of a ``searcher`` section itself."""
    if not isinstance(s, dict):
        s = {}
    source = s.get("source_checkpoint_uuid")
    trial = s.get("source_trial_id")
    return SearcherView(
        name=str(s.get("name") or ""),
        metric=str(s.get("metric") or ""),
        smaller_is_better=bool(s.get("smaller_is_better", True)),
        source_checkpoint_uuid=source if isinstance(source, str) and source else None,
        source_trial_id=trial if isinstance(trial, int) and not isinstance(trial, bool) else None,
        time_metric=str(s.get("time_metric") or ""),
        max_length=s.get("max_length"),
    )


@dataclass(frozen=True)
class SaveView:
    """``checkpoint_storage``'s retention: how many checkpoints of each kind stay (Determined's defaults)."""

    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1


def save_policy_of(config: Any) -> SaveView:
    storage = _section(config, "checkpoint_storage")
    defaults = SaveView()
    return SaveView(int(storage.get("save_experiment_best", defaults.save_experiment_best)),
                    int(storage.get("save_trial_best", defaults.save_trial_best)),
                    int(storage.get("save_trial_latest", defaults.save_trial_latest)))
