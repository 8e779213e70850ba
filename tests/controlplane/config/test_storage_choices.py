"""The admin's storage choices: master.yaml's list is checked at start (every mistake naming its field),
and an experiment's block resolves to one choice's own block, with at most a sub-path of plain names."""

from __future__ import annotations

import pytest
import yaml

from controlplane.config.errors import ConfigError
from controlplane.config.storage_choices import parse_choices, resolve
from controlplane.master.settings import load_settings

DEFAULT = {"type": "shared_fs", "host_path": "/srv/ckpts"}
MORE = [{"name": "scratch", "type": "shared_fs", "host_path": "/mnt/scratch", "storage_path": "det"},
        {"name": "team", "type": "gcs", "bucket": "team-bucket", "prefix": "runs"}]


def test_master_yaml_choices_are_checked_at_start_every_mistake_naming_its_field(tmp_path):
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump({"checkpoint_storage": {"type": "shared_fs", "host_path": "relative"},
                                    "checkpoint_storage_choices": [
                                        {"name": "default", "type": "s3", "bucket": "b"},
                                        {"type": "shared_fs", "host_path": "/x"},
                                        {"name": "a", "type": "s3", "bucket": "b", "secret": "typo"},
                                        {"name": "a", "type": "gcs"},
                                        {"name": "c", "type": "shared_fs", "host_path": "/c", "storage_path": "../up"},
                                    ]}))
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    message = str(raised.value)
    for expected in ("checkpoint_storage.host_path: must be an absolute path",
                     "checkpoint_storage_choices[0].name: 'default' is taken",
                     "checkpoint_storage_choices[1].name: required",
                     "checkpoint_storage_choices[2].secret: unknown field",
                     "checkpoint_storage_choices[3].name: 'a' is taken",
                     "checkpoint_storage_choices[3].bucket: required",
                     "checkpoint_storage_choices[4].storage_path: must be a relative path"):
        assert expected in message, message
    path.write_text(yaml.safe_dump({"checkpoint_storage": DEFAULT, "checkpoint_storage_choices": MORE}))
    assert [c.name for c in load_settings(path).storage_choices()] == ["default", "scratch", "team"]


def test_a_block_resolves_to_its_choice_and_a_sub_path_of_plain_names():
    choices = parse_choices(DEFAULT, MORE)
    assert resolve(None, choices) == DEFAULT
    assert resolve({"save_trial_best": 4}, choices) == {**DEFAULT, "save_trial_best": 4}
    assert resolve({"storage_path": "me//runs/"}, choices) == {**DEFAULT, "storage_path": "me/runs"}
    assert resolve({"name": "scratch"}, choices) == {"type": "shared_fs", "host_path": "/mnt/scratch",
                                                     "storage_path": "det"}  # no name stored: the admin's block
    assert resolve({"type": "shared_fs", "host_path": "/mnt/scratch", "storage_path": "det/me"}, choices)[
        "storage_path"] == "det/me"
    assert resolve({"type": "gcs", "bucket": "team-bucket"}, choices) == {
        "type": "gcs", "bucket": "team-bucket", "prefix": "runs"}
    assert resolve("not a mapping", choices) == "not a mapping"  # for the config check to refuse


@pytest.mark.parametrize("block,field", [
    ({"name": "scratch", "storage_path": "elsewhere"}, "storage_path"),  # not under the choice's det/
    ({"name": "scratch", "storage_path": "det/../x"}, "storage_path"),
    ({"type": "gcs", "bucket": "team-bucket", "prefix": "runs/0123abcd"}, "prefix"),
    ({"type": "gcs", "bucket": "team-bucket", "prefix": "runs/.x"}, "prefix"),
    ({"type": "shared_fs", "host_path": "/srv"}, "host_path"),  # above a choice is not a choice
    ({"type": "s3", "bucket": "team-bucket"}, "type"),  # no s3 choice at all
    ({"name": "team", "type": "shared_fs"}, "type"),
    ({"name": "team", "bucket": "other"}, "bucket"),
    ({"name": "team", "temp_dir": "/etc"}, "temp_dir"),
    ({"name": "team", "nonsense": 1}, "nonsense"),
])
def test_a_block_that_is_no_choice_of_the_admins_is_refused_naming_the_field(block, field):
    with pytest.raises(ConfigError) as raised:
        resolve(block, parse_choices(DEFAULT, MORE))
    assert f"checkpoint_storage.{field}:" in str(raised.value), str(raised.value)
