"""The core API, unchanged, checkpoints through every backend via ``checkpoint_storage``; on the
cluster it reports a checkpoint only once every file is in the store."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from controlplane import core


@pytest.fixture(autouse=True)
def no_task_env(monkeypatch):
    for var in ("DET_INFO_DIR", "DET_MASTER", "DET_SESSION_TOKEN", "DET_ALLOCATION_ID"):
        monkeypatch.delenv(var, raising=False)


def test_store_then_restore_gives_identical_bytes(backend, tmp_path):
    weights = os.urandom(17 * 1024 * 1024 + 3)  # above the default 16 MiB multipart threshold
    with core.init(checkpoint_dir=tmp_path / "unused", checkpoint_storage=backend.config) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 42, "lr": 0.1}) as (path, ckpt_uuid):
            (path / "model").mkdir()
            (path / "model" / "weights.bin").write_bytes(weights)
            (path / "step.txt").write_text("42")
        # store_path returned: every file, metadata.json included, is in the store
        assert backend.storage.resources(ckpt_uuid) == {
            "model/weights.bin": len(weights), "step.txt": 2,
            "metadata.json": len(json.dumps({"steps_completed": 42, "lr": 0.1}))}

        with ctx.checkpoint.restore_path(ckpt_uuid) as restored:
            assert hashlib.sha256((restored / "model" / "weights.bin").read_bytes()).digest() \
                == hashlib.sha256(weights).digest()
            assert (restored / "step.txt").read_text() == "42"
        assert ctx.checkpoint.get_metadata(ckpt_uuid) == {"steps_completed": 42, "lr": 0.1}

        ctx.checkpoint.delete(ckpt_uuid)
        with pytest.raises(FileNotFoundError):
            ctx.checkpoint.download(ckpt_uuid, tmp_path / "gone")


def test_on_the_cluster_the_report_follows_the_upload(cloud, tmp_path, monkeypatch):
    from tests.controlplane.core.conftest import FakeMaster, experiment_config, write_info

    master = FakeMaster()
    in_store_when_reported: dict[str, list[str]] = {}
    answer = master._answer

    def recording(method, path, query, body):  # runs on the fake master's thread, at report time
        if method == "POST" and path == "/api/v1/checkpoints":
            in_store_when_reported[body["uuid"]] = cloud.stored(body["uuid"])
        return answer(method, path, query, body)

    master._answer = recording
    config = {**experiment_config(tmp_path), "checkpoint_storage": cloud.config}
    write_info(tmp_path / "info", master.url, config)
    monkeypatch.setenv("DET_INFO_DIR", str(tmp_path / "info"))
    try:
        with core.init() as ctx:
            with ctx.checkpoint.store_path({"steps_completed": 5}) as (path, ckpt_uuid):
                (path / "a").mkdir()
                (path / "a" / "w.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    finally:
        master.close()

    assert in_store_when_reported[ckpt_uuid] == ["a/w.bin", "metadata.json"]
    reported = master.checkpoints[ckpt_uuid]["resources"]
    assert reported == {k: str(v) for k, v in cloud.storage.resources(ckpt_uuid).items()}
