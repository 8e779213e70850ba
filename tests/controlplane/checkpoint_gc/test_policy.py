"""The save_* retention rule on small experiments whose right answer can be read off."""

from __future__ import annotations

import math

from controlplane.checkpoint_gc import CheckpointView as C
from controlplane.checkpoint_gc import SavePolicy, doomed

# Two trials, three checkpoints each (steps 10, 20, 30); trial 1 is better early, trial 2 late.
EXP = [C("1a", 1, 10, 0.30), C("1b", 1, 20, 0.50), C("1c", 1, 30, 0.40),
       C("2a", 2, 10, 0.90), C("2b", 2, 20, 0.20), C("2c", 2, 30, 0.60)]


def kept(policy: SavePolicy, ckpts=EXP, protected=frozenset()) -> set[str]:
    gone = {d.uuid for d in doomed(ckpts, policy, set(protected))}
    return {c.uuid for c in ckpts} - gone


def test_determined_defaults_keep_each_trials_best_and_latest():
    assert kept(SavePolicy()) == {"1a", "1c", "2b", "2c"}


def test_experiment_best_counts_across_trials():
    assert kept(SavePolicy(save_experiment_best=2, save_trial_best=0, save_trial_latest=0)) == {"2b", "1a"}


def test_larger_is_better_flips_the_ranking():
    assert kept(SavePolicy(save_experiment_best=1, save_trial_best=0, save_trial_latest=0,
                           smaller_is_better=False)) == {"2a"}


def test_latest_only_keeps_by_steps():
    assert kept(SavePolicy(save_experiment_best=0, save_trial_best=0, save_trial_latest=2)) == {"1b", "1c", "2b", "2c"}


def test_all_zero_keeps_only_the_registry():
    assert kept(SavePolicy(0, 0, 0), protected={"2a"}) == {"2a"}


def test_checkpoints_without_a_metric_are_kept_only_as_latest():
    ckpts = [C("x", 1, 10, None), C("y", 1, 20, math.nan), C("z", 1, 30, None)]
    assert kept(SavePolicy(save_experiment_best=5, save_trial_best=5, save_trial_latest=1), ckpts) == {"z"}


def test_every_doomed_checkpoint_says_why():
    [d] = [d for d in doomed(EXP, SavePolicy()) if d.uuid == "1b"]
    assert "rank 4 in the experiment and 3 in trial 1" in d.reason and "save_trial_best=1" in d.reason
    assert all(d.reason for d in doomed(EXP, SavePolicy(0, 0, 0)))


def test_the_answer_does_not_depend_on_row_order():
    assert doomed(EXP, SavePolicy()) == doomed(list(reversed(EXP)), SavePolicy())


def test_policy_is_read_from_the_experiment_config():
    cfg = {"checkpoint_storage": {"type": "s3", "save_experiment_best": 3, "save_trial_best": 0,
                                  "save_trial_latest": 2}, "searcher": {"smaller_is_better": False}}
    assert SavePolicy.of(cfg) == SavePolicy(3, 0, 2, False)
    assert SavePolicy.of({}) == SavePolicy(0, 1, 1, True)
