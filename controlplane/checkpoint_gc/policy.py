"""Determined's `save_*` retention rule, as a pure function.

For each completed checkpoint of an experiment: its rank by the searcher metric across the
experiment and within its trial (best first, the sign from `smaller_is_better`), and its rank by
`steps_completed` within its trial (newest first). It is kept when any of these holds:
experiment rank <= `save_experiment_best`, trial rank <= `save_trial_best` (only for a checkpoint
with a validation metric), or steps rank <= `save_trial_latest`. Checkpoints in the model
registry (`protected`) are never collected. Ties rank by steps then uuid, so the answer never
depends on row order.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from controlplane.config.stored import save_policy_of, searcher_of


@dataclass(frozen=True)
class SavePolicy:
    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1
    smaller_is_better: bool = True

    @classmethod
    def of(cls, config: dict[str, Any]) -> SavePolicy:
        """From an experiment's stored config (`checkpoint_storage.save_*`, `searcher`)."""
        save = save_policy_of(config)
        return cls(save.save_experiment_best, save.save_trial_best, save.save_trial_latest,
                   searcher_of(config).smaller_is_better)


@dataclass(frozen=True)
class CheckpointView:
    uuid: str
    trial_id: int
    steps_completed: int
    metric: float | None  # the searcher metric validated at this checkpoint's step, if any


@dataclass(frozen=True)
class Doomed:
    uuid: str
    reason: str


def _usable(metric: float | None) -> bool:
    return metric is not None and not math.isnan(metric)


def _metric_ranks(ckpts: Iterable[CheckpointView], smaller: bool) -> dict[str, int]:
    scored = [c for c in ckpts if _usable(c.metric)]
    scored.sort(key=lambda c: ((c.metric if smaller else -c.metric), -c.steps_completed, c.uuid))  # type: ignore[operator]
    return {c.uuid: i + 1 for i, c in enumerate(scored)}


def doomed(ckpts: Sequence[CheckpointView], policy: SavePolicy,
           protected: AbstractSet[str] = frozenset()) -> list[Doomed]:
    """The checkpoints the policy does not keep, each with the sentence that says why."""
    by_trial: dict[int, list[CheckpointView]] = defaultdict(list)
    for c in ckpts:
        by_trial[c.trial_id].append(c)
    exp_rank = _metric_ranks(ckpts, policy.smaller_is_better)
    trial_rank: dict[str, int] = {}
    latest_rank: dict[str, int] = {}
    for trial in by_trial.values():
        trial_rank.update(_metric_ranks(trial, policy.smaller_is_better))
        newest_first = sorted(trial, key=lambda c: (-c.steps_completed, c.uuid))
        latest_rank.update({c.uuid: i + 1 for i, c in enumerate(newest_first)})
    out = []
    for c in sorted(ckpts, key=lambda c: (c.trial_id, c.steps_completed, c.uuid)):
        if c.uuid in protected or latest_rank[c.uuid] <= policy.save_trial_latest:
            continue
        if c.uuid in exp_rank and (exp_rank[c.uuid] <= policy.save_experiment_best
                                   or trial_rank[c.uuid] <= policy.save_trial_best):
            continue
        metric = (f"searcher metric rank {exp_rank[c.uuid]} in the experiment and {trial_rank[c.uuid]} in trial "
                  f"{c.trial_id}" if c.uuid in exp_rank else "no validation metric")
        out.append(Doomed(c.uuid, f"{metric}, number {latest_rank[c.uuid]} by steps in its trial: "
                                  "outside save_experiment_best="
                                  f"{policy.save_experiment_best}, save_trial_best={policy.save_trial_best}, "
                                  f"save_trial_latest={policy.save_trial_latest}"))
    return out
