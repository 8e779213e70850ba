"""`det checkpoint download --mode direct` reads storage with this machine's credentials, never the mask."""

from __future__ import annotations

from controlplane.cli.checkpoint import REDACTED, client_storage_config
from controlplane.master.redaction import MASK, redact_config


def test_withheld_secrets_are_dropped_so_the_sdk_uses_its_own_credentials():
    stored = {"type": "s3", "bucket": "b", "access_key": "AKIA", "secret_key": "s3cr3t", "endpoint_url": "http://x"}
    shown = redact_config({"checkpoint_storage": stored})["checkpoint_storage"]  # what an answer carries
    assert REDACTED == MASK and shown["secret_key"] == REDACTED
    config, withheld = client_storage_config(shown)
    assert withheld == ["access_key", "secret_key"]
    assert config == {"type": "s3", "bucket": "b", "endpoint_url": "http://x"}


def test_configs_without_secrets_are_kept_as_they_are():
    config = {"type": "shared_fs", "host_path": "/mnt/c", "storage_path": "ckpt"}
    assert client_storage_config(config) == (config, [])
