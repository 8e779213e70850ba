"""Checkpoint storage behind one small interface; `shared_fs` and `directory` live here.

Writers stage a checkpoint in a temporary sibling directory and rename it into place, so a
checkpoint directory that exists is complete. Cloud stores (S3, GCS) implement the same
interface.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path


class CheckpointNotFound(FileNotFoundError):
    pass


class StorageManager:
    """What a checkpoint backend provides; ``store_path``/``restore_path`` are context managers.

    ``store_path(uuid)`` yields a staging directory and publishes it complete on a clean exit
    (and removes it on an exception); ``resources(uuid)`` lists {relpath: size} of a stored one.
    """

    def store_path(self, ckpt_uuid: str) -> contextlib.AbstractContextManager[Path]:
        raise NotImplementedError

    def upload_dir(self, src: Path, ckpt_uuid: str) -> None:
        raise NotImplementedError

    def download(self, ckpt_uuid: str, dst: Path) -> None:
        raise NotImplementedError

    def restore_path(self, ckpt_uuid: str) -> contextlib.AbstractContextManager[Path]:
        raise NotImplementedError

    def delete(self, ckpt_uuid: str) -> None:
        raise NotImplementedError

    def resources(self, ckpt_uuid: str) -> dict[str, int]:
        raise NotImplementedError


def directory_resources(root: Path) -> dict[str, int]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p.stat().st_size
    return out


class LocalDirectoryStorage(StorageManager):
    """Checkpoints as directories `<base>/<uuid>` on a file system this process can see."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)

    def _final(self, ckpt_uuid: str) -> Path:
        if not ckpt_uuid or "/" in ckpt_uuid or "\\" in ckpt_uuid or ckpt_uuid in (".", ".."):
            raise ValueError(f"not a checkpoint uuid: {ckpt_uuid!r}")
        return self.base / ckpt_uuid

    @contextlib.contextmanager
    def store_path(self, ckpt_uuid: str) -> Iterator[Path]:
        self.base.mkdir(parents=True, exist_ok=True)
        staging = self.base / f"{ckpt_uuid}.tmp-{uuidlib.uuid4().hex[:8]}"  # same parent: rename is atomic
        staging.mkdir()
        try:
            yield staging
            os.replace(staging, self._final(ckpt_uuid))
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
        shutil.rmtree(self._final(ckpt_uuid), ignore_errors=True)

    def resources(self, ckpt_uuid: str) -> dict[str, int]:
        return directory_resources(self._existing(ckpt_uuid))

    def _existing(self, ckpt_uuid: str) -> Path:
        path = self._final(ckpt_uuid)
        if not path.is_dir():
            raise CheckpointNotFound(f"checkpoint {ckpt_uuid} not found in {self.base}")
        return path


def _inside(base: Path, sub: str | None) -> Path:
    if not sub:
        return base
    path = (base / sub).resolve()
    if path != base.resolve() and base.resolve() not in path.parents:
        raise ValueError(f"checkpoint_storage.storage_path {sub!r} must be a directory inside host_path {base}")
    return path


def from_config(cfg: dict | str | Path | None, default_dir: Path) -> StorageManager:
    """The storage of an experiment's `checkpoint_storage` (a dict), or a plain directory
    (str/Path, as ``core.init(checkpoint_storage=...)`` accepts); None → default_dir."""
    if not cfg:
        return LocalDirectoryStorage(Path(default_dir))
    if isinstance(cfg, (str, Path)):
        return LocalDirectoryStorage(Path(cfg))
    kind = cfg.get("type")
    if kind == "shared_fs":
        if not cfg.get("host_path"):
            raise ValueError("checkpoint_storage: shared_fs needs host_path")
        return LocalDirectoryStorage(_inside(Path(cfg["host_path"]), cfg.get("storage_path")))
    if kind == "directory":
        if not cfg.get("container_path"):
            raise ValueError("checkpoint_storage: directory needs container_path")
        return LocalDirectoryStorage(Path(cfg["container_path"]))
    raise ValueError(f"checkpoint_storage.type {kind!r} is not supported by this version of the core API "
                     "(shared_fs, directory)")
