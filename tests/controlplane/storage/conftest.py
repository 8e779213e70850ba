"""Every storage scenario runs on shared_fs, S3 (moto server) and GCS (gcp-storage-emulator).

``backend`` builds a store the way production does (``from_config``) with small transfer
settings, so a 20 MiB file already goes in 5 MiB parts (S3 multipart, GCS resumable chunks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.storage import StorageManager, TransferSettings, from_config
from tests.controlplane.storage.checkpoints import MiB
from tests.support.storage_servers import gcs_bucket, gcs_emulator, moto_s3, s3_bucket  # noqa: F401 (fixtures)

PREFIX = "team/exp"
SMALL = TransferSettings(max_workers=4, multipart_threshold=5 * MiB, part_size=5 * MiB, gcs_chunk_size=5 * MiB,
                         attempts=2, retry_deadline_s=2.0, cleanup_deadline_s=15.0)


@dataclass
class Backend:
    """A store under test plus ways to look at the bucket without going through it."""

    kind: str
    config: dict
    storage: StorageManager
    stored: Callable[[str], list[str]]
    """The relpaths kept under a checkpoint uuid, listed without going through the store under test."""

    def build(self, **overrides: object) -> StorageManager:
        return from_config({**self.config, **overrides}, Path("/nonexistent"), transfer=SMALL)


@pytest.fixture(params=["shared_fs", "s3", "gcs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request, request.param, tmp_path)


@pytest.fixture(params=["s3", "gcs"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request, request.param, tmp_path)


def make_backend(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Backend:
    if kind == "shared_fs":
        root = tmp_path / "shared"
        config = {"type": "shared_fs", "host_path": str(root), "storage_path": "ckpts", "save_trial_best": 1}

        def stored(ckpt_uuid: str) -> list[str]:
            base = root / "ckpts"  # staging siblings (<uuid>.tmp-*) count too: they are leftovers
            dirs = [d for d in base.glob(f"{ckpt_uuid}*") if d.is_dir()] if base.exists() else []
            return sorted(p.relative_to(d).as_posix() for d in dirs for p in d.rglob("*") if p.is_file())
    else:
        bucket = request.getfixturevalue(f"{kind}_bucket")
        config = {**bucket.config, "prefix": PREFIX, "save_trial_latest": 1}

        def stored(ckpt_uuid: str) -> list[str]:
            start = f"{PREFIX}/{ckpt_uuid}/"
            return [k[len(start):] for k in bucket.keys(start)]
    return Backend(kind, config, from_config(config, Path("/nonexistent"), transfer=SMALL), stored)
