"""On the cluster, a checkpoint whose upload fails is never reported complete: the training code
sees a clear storage error, the master hears only that an upload began, and the bucket holds
nothing of it."""

from __future__ import annotations

import pytest

from controlplane import core
from controlplane.storage import StorageUnavailable
from controlplane.storage.s3 import S3Storage
from tests.controlplane.core.conftest import experiment_config, fake_master, write_info  # noqa: F401 (fixture)
from tests.controlplane.storage.faults import Outage, s3_outage_hook

PREFIX = "team/exp"


@pytest.fixture
def s3_on_cluster(tmp_path, fake_master, s3_bucket, monkeypatch):  # noqa: F811 (fixture)
    for var in ("DET_MASTER", "DET_SESSION_TOKEN", "DET_ALLOCATION_ID", "DET_TRIAL_ID"):
        monkeypatch.delenv(var, raising=False)
    config = experiment_config(tmp_path / "unused")
    config["checkpoint_storage"] = {**s3_bucket.config, "prefix": PREFIX, "save_trial_latest": 1}
    write_info(tmp_path / "info", fake_master.url, config)
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    return s3_bucket


def test_an_upload_that_fails_midway_is_not_reported(s3_on_cluster, fake_master, monkeypatch):  # noqa: F811
    outage = Outage(start_after=3, recover_after=1)
    make_client = S3Storage._make_client

    def client_with_outage(self):  # the store's own client, with a dying network under it
        client = make_client(self)
        client.meta.events.register("before-send.s3", s3_outage_hook(outage))
        return client

    monkeypatch.setattr(S3Storage, "_make_client", client_with_outage)
    with core.init() as ctx:
        with pytest.raises(StorageUnavailable) as caught:
            with ctx.checkpoint.store_path({"steps_completed": 10}) as (path, ckpt_uuid):
                for i in range(8):
                    (path / f"shard-{i}.bin").write_bytes(bytes([i]) * 4096)
        assert ckpt_uuid in str(caught.value) and "not stored" in str(caught.value)
    # The master heard only that an upload began (STATE_ACTIVE): never a completed checkpoint.
    assert [r.body["state"] for r in fake_master.calls("POST", "/api/v1/checkpoints")] == ["STATE_ACTIVE"]
    assert s3_on_cluster.keys(PREFIX) == []
    assert outage.failed > 0
