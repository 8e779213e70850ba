"""The config Determined's harness reads: its defaults filled under what the experiment says."""

from __future__ import annotations

from controlplane.config.harness_view import harness_config


def test_the_keys_determineds_harness_indexes_are_there_with_its_defaults() -> None:
    config = harness_config({"entrypoint": "python3 train.py", "min_checkpoint_period": None,
                             "resources": {"slots_per_trial": 2}})
    assert config["optimizations"]["aggregation_frequency"] == 1
    assert config["profiling"]["enabled"] is False
    assert config["min_checkpoint_period"] == {"batches": 0}  # an explicit null became Determined's map
    assert config["min_validation_period"] == {"batches": 0}
    assert (config["scheduling_unit"], config["checkpoint_policy"], config["perform_initial_validation"]) == (
        100, "best", False)
    assert config["resources"] == {"slots_per_trial": 2, "native_parallel": False, "shm_size": None, "devices": []}


def test_what_the_experiment_says_wins_and_the_stored_config_is_not_changed() -> None:
    stored = {"optimizations": {"aggregation_frequency": 4}, "checkpoint_policy": "none",
              "min_validation_period": {"epochs": 1}}
    config = harness_config(stored)
    assert config["optimizations"]["aggregation_frequency"] == 4
    assert config["optimizations"]["average_training_metrics"] is True
    assert config["checkpoint_policy"] == "none" and config["min_validation_period"] == {"epochs": 1}
    assert stored == {"optimizations": {"aggregation_frequency": 4}, "checkpoint_policy": "none",
                      "min_validation_period": {"epochs": 1}}
