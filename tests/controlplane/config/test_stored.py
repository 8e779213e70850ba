"""The typed views of a stored config: every reader gets the same defaults from one place."""

from __future__ import annotations

from controlplane.config.stored import save_policy_of, searcher_from, searcher_of


def test_a_config_that_says_nothing_reads_as_the_defaults_and_malformed_sections_do_too() -> None:
    for config in ({}, None, {"searcher": None}, {"searcher": "grid"}, "not a config"):
        s = searcher_of(config)
        assert (s.name, s.metric, s.smaller_is_better, s.source_checkpoint_uuid, s.time_unit) == (
            "", "", True, None, "batches")
        assert save_policy_of(config) == save_policy_of({"checkpoint_storage": {}})
    assert (save_policy_of({}).save_experiment_best, save_policy_of({}).save_trial_best,
            save_policy_of({}).save_trial_latest) == (0, 1, 1)  # Determined's


def test_what_a_searcher_says_is_read_as_written() -> None:
    s = searcher_of({"searcher": {"name": "adaptive_asha", "metric": "acc", "smaller_is_better": False,
                                  "source_checkpoint_uuid": "u-1", "source_trial_id": 4,
                                  "max_length": {"epochs": 3}}})
    assert (s.name, s.metric, s.smaller_is_better, s.source_checkpoint_uuid, s.source_trial_id) == (
        "adaptive_asha", "acc", False, "u-1", 4)
    assert s.time_unit == "epochs" and s.best([0.5, 0.9, 0.7]) == 0.9 and s.sign == -1.0
    assert searcher_from({"time_metric": "records", "max_length": {"epochs": 3}}).time_unit == "records"
    assert searcher_from({"source_trial_id": True}).source_trial_id is None  # a bool is no trial id
