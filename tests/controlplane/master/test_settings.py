"""master.yaml's preemption timeout: Determined's default (an hour), its names for it, per pool."""

from __future__ import annotations

import pytest
import yaml

from controlplane.config.errors import ConfigError
from controlplane.master.settings import MasterSettings, load_settings


def settings_from(tmp_path, config: dict) -> MasterSettings:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(path)


def test_the_default_is_determineds_hour(tmp_path):
    settings = settings_from(tmp_path, {})
    assert settings.preemption_timeout_s == 3600
    assert settings.preemption_timeout_for("default") == 3600


@pytest.mark.parametrize("config", [
    {"preemption_timeout": "90s"},
    {"preemption_timeout": 90},
    {"task_container_defaults": {"preemption_timeout": 90}},  # Determined's name, in seconds
    {"preemption_timeout": "90s", "task_container_defaults": {"preemption_timeout": 90}},  # both, agreeing
])
def test_the_masters_timeout_by_either_name(tmp_path, config):
    assert settings_from(tmp_path, config).preemption_timeout_s == 90


def test_a_pools_timeout_wins_over_the_masters_and_an_experiments_over_both(tmp_path):
    settings = settings_from(tmp_path, {
        "preemption_timeout": "10m",
        "resource_pools": [{"pool_name": "default"},
                           {"pool_name": "spot", "task_container_defaults": {"preemption_timeout": 120}}]})
    assert [p.preemption_timeout_s for p in settings.pools] == [None, 120]
    assert settings.preemption_timeout_for("default") == 600
    assert settings.preemption_timeout_for("spot") == 120
    assert settings.preemption_timeout_for("spot", 7) == 7
    assert settings.preemption_timeout_for("default", 0) == 0
    assert settings.preemption_timeout_for("gone") == 600  # a pool no longer configured: the master's


@pytest.mark.parametrize(("config", "path"), [
    ({"preemption_timeout": "1h", "task_container_defaults": {"preemption_timeout": 60}}, "preemption_timeout"),
    ({"preemption_timeout": -1}, "preemption_timeout"),
    ({"preemption_timeout": True}, "preemption_timeout"),
    ({"task_container_defaults": {"preemption_timeout": "soon"}}, "task_container_defaults.preemption_timeout"),
    ({"resource_pools": [{"pool_name": "a", "task_container_defaults": {"preemption_timeout": 2**40}}]},
     "resource_pools[0].task_container_defaults.preemption_timeout"),
    ({"resource_pools": [{"pool_name": "a", "task_container_defaults": []}]},
     "resource_pools[0].task_container_defaults"),
])
def test_a_bad_timeout_names_its_field(tmp_path, config, path):
    with pytest.raises(ConfigError) as e:
        settings_from(tmp_path, config)
    assert e.value.path == path
