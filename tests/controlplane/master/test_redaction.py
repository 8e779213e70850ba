"""The one redaction: secret-named keys in a config's secret-bearing sections become ``********``,
in the parsed config and in the YAML text as the user wrote it; nothing else changes."""

from __future__ import annotations

import yaml

from controlplane.master.redaction import MASK, redact_config, redact_storage, redact_yaml_text, restore_masked

TEXT = """name: x  # keep me
hyperparameters:
  max_tokens: 512
checkpoint_storage:
  type: s3
  bucket: b
  access_key: AKIA1   # the key id
  "secret_key": "sk-2"
environment:
  environment_variables:
    - AWS_SECRET_ACCESS_KEY=env-3
    - "HF_TOKEN=hf-4"
    - PATH=/bin
  registry_auth:
    password: pw-5
"""
SECRETS = ("AKIA1", "sk-2", "env-3", "hf-4", "pw-5")


def test_block_style_text_keeps_its_comments_and_loses_its_secrets():
    out = redact_yaml_text(TEXT, yaml.safe_load(TEXT))
    assert not [s for s in SECRETS if s in out]
    assert "# keep me" in out and "# the key id" in out
    parsed = yaml.safe_load(out)
    assert parsed["checkpoint_storage"] == {"type": "s3", "bucket": "b", "access_key": MASK, "secret_key": MASK}
    assert parsed["environment"]["environment_variables"] == [
        f"AWS_SECRET_ACCESS_KEY={MASK}", f"HF_TOKEN={MASK}", "PATH=/bin"]
    assert parsed["hyperparameters"] == {"max_tokens": 512}  # not a secret section


def test_flow_style_and_block_scalars_fall_back_to_a_redacted_dump():
    for text in ("name: x\ncheckpoint_storage: {type: s3, secret_key: sk-2}\n",
                 "name: x\ncheckpoint_storage:\n  type: s3\n  secret_key: |\n    sk-2\n    more\n",
                 "name: x\ncheckpoint_storage:\n  type: s3\n  secret_key: sk-2\n  bucket: sk-2-bucket\n"):
        out = redact_yaml_text(text, yaml.safe_load(text))
        assert "sk-2\n" not in out and "sk-2," not in out and "sk-2}" not in out, out
        assert yaml.safe_load(out)["checkpoint_storage"]["secret_key"] == MASK


def test_config_redaction_copies_and_leaves_other_sections_alone():
    config = yaml.safe_load(TEXT)
    out = redact_config(config)
    assert out["checkpoint_storage"]["secret_key"] == MASK
    assert config["checkpoint_storage"]["secret_key"] == "sk-2"  # the stored config is untouched
    assert out["hyperparameters"] is config["hyperparameters"]
    assert redact_config({"name": "x"}) == {"name": "x"}
    assert redact_storage({"type": "gcs", "bucket": "b", "credentials": "/k.json"})["credentials"] == MASK
    assert redact_yaml_text("name: x\n") == "name: x\n"  # nothing secret-like: untouched


def test_a_redacted_config_sent_back_gets_its_secrets_again_and_nothing_else():
    old = yaml.safe_load(TEXT)
    sent = redact_config(old)
    sent["checkpoint_storage"]["bucket"] = "b2"
    sent["environment"]["environment_variables"].append(f"NEW_TOKEN={MASK}")  # no secret stood there
    sent["hyperparameters"]["max_tokens"] = MASK  # not a secret section: kept as sent
    back = restore_masked(sent, old)
    assert back["checkpoint_storage"] == {**old["checkpoint_storage"], "bucket": "b2"}
    assert back["environment"]["environment_variables"] == [*old["environment"]["environment_variables"],
                                                            f"NEW_TOKEN={MASK}"]
    assert back["environment"]["registry_auth"] == {"password": "pw-5"}
    assert back["hyperparameters"] == {"max_tokens": MASK}
    per_device = {"environment": {"environment_variables": {"cuda": ["HF_TOKEN=hf-4"]}}}
    assert restore_masked(redact_config(per_device), per_device) == per_device
    assert restore_masked(sent, {}) == sent  # nothing stored: the mask is what was sent
