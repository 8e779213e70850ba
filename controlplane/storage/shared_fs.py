"""Checkpoints as directories ``<base>/<uuid>`` on a file system this process can see.

Used for ``shared_fs`` (the agent mounts ``host_path`` into the task) and ``directory``. A writer
stages into a temporary sibling and renames it into place, so a directory that exists is complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

from controlplane.storage.base import StorageManager, check_uuid, directory_resources
from controlplane.storage.errors import CheckpointNotFound

_STAGING = ".tmp-"


class LocalDirectoryStorage(StorageManager):
    """The ``StorageManager`` contract over a local or mounted directory."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)

    def __repr__(self) -> str:
        return f"LocalDirectoryStorage({str(self.base)!r})"

    def _final(self, ckpt_uuid: str) -> Path:
        return self.base / check_uuid(ckpt_uuid)

    @contextlib.contextmanager
    def store_path(self, ckpt_uuid: str) -> Iterator[Path]:
        final = self._final(ckpt_uuid)
        self.base.mkdir(parents=True, exist_ok=True)
        staging = self.base / f"{ckpt_uuid}{_STAGING}{uuidlib.uuid4().hex[:8]}"  # same parent: rename is atomic
        staging.mkdir()
        try:
            yield staging
            os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def upload_dir(self, src: Path, ckpt_uuid: str) -> None:
        with self.store_path(ckpt_uuid) as staging:
            shutil.copytree(src, staging, dirs_exist_ok=True)

    def download(self, ckpt_uuid: str, dst: Path) -> None:
        shutil.copytree(self._existing(ckpt_uuid), dst, dirs_exist_ok=True)

    @contextlib.contextmanager
    def restore_path(self, ckpt_uuid: str) -> Iterator[Path]:
        yield self._existing(ckpt_uuid)

    def delete(self, ckpt_uuid: str) -> None:
        try:
            shutil.rmtree(self._final(ckpt_uuid))
        except FileNotFoundError:  # already gone: deleting is idempotent; any other failure is raised
            pass

    def resources(self, ckpt_uuid: str) -> dict[str, int]:
        return directory_resources(self._existing(ckpt_uuid))

    def list_checkpoints(self) -> list[str]:
        if not self.base.is_dir():
            return []
        return sorted(p.name for p in self.base.iterdir() if p.is_dir() and _STAGING not in p.name)

    def _existing(self, ckpt_uuid: str) -> Path:
        path = self._final(ckpt_uuid)
        if not path.is_dir():
            raise CheckpointNotFound(f"checkpoint {ckpt_uuid} not found in {self.base} (deleted, or never stored)")
        return path
