"""checkpoint_storage configs → stores, and the import-time promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.core import storage as core_storage
from controlplane.storage import GCSStorage, LocalDirectoryStorage, S3Storage, TransferSettings, from_config


def test_the_types(tmp_path):
    assert isinstance(from_config(None, tmp_path), LocalDirectoryStorage)
    assert from_config({"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "c"}, tmp_path).base \
        == (tmp_path / "c").resolve()
    s3 = from_config({"type": "s3", "bucket": "b", "prefix": "/a//b/", "endpoint_url": "http://127.0.0.1:1",
                      "access_key": "AK", "secret_key": "SK", "save_experiment_best": 0, "save_trial_best": 1,
                      "save_trial_latest": 1}, tmp_path)
    assert isinstance(s3, S3Storage) and s3.where("u") == "s3://b/a/b/u/" and s3.endpoint_url == "http://127.0.0.1:1"
    gcs = from_config({"type": "gcs", "bucket": "g", "save_trial_latest": 2}, tmp_path,
                      transfer=TransferSettings(max_workers=2))
    assert isinstance(gcs, GCSStorage) and gcs.where("u") == "gs://g/u/" and gcs.transfer.max_workers == 2


@pytest.mark.parametrize("cfg, message", [
    ({"type": "s3", "bucket": "b", "secert_key": "x"}, "s3 does not take secert_key"),
    ({"type": "gcs", "bucket": "b", "endpoint_url": "x"}, "gcs does not take endpoint_url"),
    ({"type": "s3"}, "s3 needs bucket"),
    ({"type": "s3", "bucket": "b", "access_key": "AK"}, "both access_key and secret_key"),
    ({"type": "gcs", "bucket": "b", "prefix": "a/../b"}, "may not contain"),
    ({"type": "azure", "container": "c"}, "'azure' is not supported"),
])
def test_invalid_configs_say_why(cfg, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        from_config(cfg, tmp_path)


def test_secrets_stay_out_of_repr(tmp_path):
    s3 = from_config({"type": "s3", "bucket": "b", "access_key": "AK", "secret_key": "TOPSECRET"}, tmp_path)
    assert "TOPSECRET" not in repr(s3)


def test_core_storage_still_exports_the_old_names():
    assert core_storage.from_config is from_config
    assert core_storage.LocalDirectoryStorage is LocalDirectoryStorage
    assert issubclass(core_storage.CheckpointNotFound, FileNotFoundError)


def test_cloud_sdks_load_only_when_used():
    code = ("import sys, controlplane.core, controlplane.storage; from pathlib import Path; "
            "controlplane.storage.from_config({'type': 's3', 'bucket': 'b'}, Path('.')); "
            "print(sorted(m for m in sys.modules if m.startswith(('boto3', 'botocore', 'google.cloud'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout
    assert out.strip() == "[]"


def test_shared_fs_in_a_task_sandbox_uses_the_container_path(tmp_path):
    cfg = {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"}
    assert from_config(cfg, tmp_path).base == (tmp_path / "ckpts").resolve()  # the master, det CLI
    assert from_config(cfg, tmp_path, in_container=True).base == Path("/determined_shared_fs/ckpts")
    custom = {**cfg, "container_path": "/mnt/shared"}
    assert from_config(custom, tmp_path, in_container=True).base == Path("/mnt/shared/ckpts")
    with pytest.raises(ValueError, match="storage_path"):
        from_config({**cfg, "storage_path": "../out"}, tmp_path, in_container=True)
