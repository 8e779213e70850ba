"""A template under an experiment config, by Determined's rule: the config wins, maps merge, lists replace."""

from __future__ import annotations

import copy

from controlplane.config.merge import merge_template


def test_the_config_wins_and_the_template_fills_what_it_leaves_out():
    config = {"name": "mine", "max_restarts": 1, "description": None}
    template = {"name": "theirs", "max_restarts": 7, "description": "from the template", "entrypoint": "python3 t.py"}
    assert merge_template(config, template) == {
        "name": "mine", "max_restarts": 1, "description": "from the template", "entrypoint": "python3 t.py"}


def test_maps_merge_at_any_depth():
    config = {"resources": {"slots_per_trial": 2}, "environment": {"image": {"cuda": "mine:gpu"}},
              "hyperparameters": {"optimizer": {"lr": 0.1}}}
    template = {"resources": {"slots_per_trial": 8, "priority": 10},
                "environment": {"image": {"cpu": "base:cpu", "cuda": "base:gpu"}, "pod_spec": {"a": {"b": 1}}},
                "hyperparameters": {"optimizer": {"lr": 0.5, "momentum": 0.9}, "batch_size": 32}}
    assert merge_template(config, template) == {
        "resources": {"slots_per_trial": 2, "priority": 10},
        "environment": {"image": {"cuda": "mine:gpu", "cpu": "base:cpu"}, "pod_spec": {"a": {"b": 1}}},
        "hyperparameters": {"optimizer": {"lr": 0.1, "momentum": 0.9}, "batch_size": 32}}


def test_lists_are_replaced_not_merged_even_by_an_empty_one():
    template = {"labels": ["a", "b"], "environment": {"environment_variables": ["A=1"]}}
    assert merge_template({"labels": ["c"]}, template)["labels"] == ["c"]
    assert merge_template({"labels": []}, template)["labels"] == []
    assert merge_template({}, template)["labels"] == ["a", "b"]
    merged = merge_template({"environment": {"environment_variables": ["B=2"]}}, template)
    assert merged["environment"]["environment_variables"] == ["B=2"]


def test_bind_mounts_and_devices_add_the_templates_entries_at_other_container_paths():
    config = {"bind_mounts": [{"host_path": "/mine", "container_path": "/data"}],
              "resources": {"devices": [{"host_path": "/dev/a", "container_path": "/dev/a"}]}}
    template = {"bind_mounts": [{"host_path": "/theirs", "container_path": "/data"},
                                {"host_path": "/cache", "container_path": "/cache"}],
                "resources": {"devices": [{"host_path": "/dev/b", "container_path": "/dev/b"}]}}
    merged = merge_template(config, template)
    assert merged["bind_mounts"] == [{"host_path": "/mine", "container_path": "/data"},
                                     {"host_path": "/cache", "container_path": "/cache"}]
    assert [d["container_path"] for d in merged["resources"]["devices"]] == ["/dev/a", "/dev/b"]


def test_another_storage_type_or_searcher_keeps_only_the_shared_fields_of_the_template():
    template = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt", "save_trial_best": 3},
                "searcher": {"name": "adaptive_asha", "metric": "acc", "smaller_is_better": False, "max_trials": 16,
                             "max_rungs": 4}}
    config = {"checkpoint_storage": {"type": "s3", "bucket": "b"},
              "searcher": {"name": "single", "max_length": {"batches": 10}}}
    merged = merge_template(config, template)
    assert merged["checkpoint_storage"] == {"type": "s3", "bucket": "b", "save_trial_best": 3}
    assert merged["searcher"] == {"name": "single", "max_length": {"batches": 10}, "metric": "acc",
                                  "smaller_is_better": False}
    same = merge_template({"checkpoint_storage": {"type": "shared_fs", "save_trial_latest": 0}}, template)
    assert same["checkpoint_storage"] == {"type": "shared_fs", "save_trial_latest": 0, "host_path": "/ckpt",
                                          "save_trial_best": 3}
    untyped = merge_template({"checkpoint_storage": {"save_trial_latest": 0}}, template)
    assert untyped["checkpoint_storage"]["type"] == "shared_fs"


def test_a_hyperparameter_of_another_type_is_the_configs_alone():
    template = {"hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}, "layers": 4}}
    config = {"hyperparameters": {"lr": {"type": "const", "val": 0.3}}}
    merged = merge_template(config, template)
    assert merged["hyperparameters"] == {"lr": {"type": "const", "val": 0.3}, "layers": 4}
    same = merge_template({"hyperparameters": {"lr": {"type": "double", "maxval": 0.5}}}, template)
    assert same["hyperparameters"]["lr"] == {"type": "double", "maxval": 0.5, "minval": 0.1}


def test_one_value_for_every_device_type_meets_a_per_device_mapping():
    template = {"environment": {"image": "base:all", "environment_variables": {"cuda": ["NCCL=1"]}}}
    config = {"environment": {"image": {"cuda": "mine:gpu"}, "environment_variables": ["A=1"]}}
    env = merge_template(config, template)["environment"]
    assert env["image"] == {"cuda": "mine:gpu", "cpu": "base:all", "rocm": "base:all"}
    assert env["environment_variables"] == {"cpu": ["A=1"], "cuda": ["A=1"], "rocm": ["A=1"]}
    plain = merge_template({"environment": {"image": "mine"}}, template)["environment"]
    assert plain["image"] == "mine"  # the same form on both sides: the config's, as written


def test_neither_input_is_changed_and_the_result_shares_nothing_with_them():
    config = {"resources": {"slots_per_trial": 1}}
    template = {"resources": {"priority": 5}, "labels": ["x"], "hyperparameters": {"h": {"type": "const", "val": 1}}}
    before = copy.deepcopy((config, template))
    merged = merge_template(config, template)
    merged["labels"].append("y")
    merged["hyperparameters"]["h"]["val"] = 2
    merged["resources"]["priority"] = 1
    assert (config, template) == before
