"""Checkpoints as directories ``<base>/<uuid>`` on a file system this process can see.

Used for ``shared_fs`` and ``directory``. A writer stages into a temporary sibling and renames it
into place, so a directory that exists is complete.

A task never sees a ``shared_fs`` host_path itself: the agent mounts its allocation's staging
directory (``staging_dir``: ``<host_path>/.staging/<allocation id>``, on the same file system) at
the container_path, plus, read-only, the checkpoints it may read. The master publishes a reported
checkpoint from there (``controlplane/master/services/checkpoint_files.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from controlplane.storage.base import StorageManager, check_uuid, directory_resources, safe_destination
from controlplane.storage.errors import CheckpointNotFound

_STAGING = ".tmp-"
STAGING_DIR = ".staging"  # <host_path>/.staging/<allocation id>: a task's writable view of a shared_fs


def staging_dir(host_path: Path, allocation_id: str) -> Path:
    """Where an allocation's tasks write their ``shared_fs`` checkpoints until the master publishes them."""
    return Path(host_path) / STAGING_DIR / check_uuid(allocation_id)


def storage_subdir(storage_path: str | None) -> str | None:
    """A ``storage_path`` as a relative path inside host_path ("" for none), or None if it leaves it."""
    if not storage_path:
        return ""
    rel = os.path.normpath(storage_path)
    if os.path.isabs(rel) or rel == ".." or rel.startswith("../"):
        return None
    return "" if rel == "." else rel


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

    def download_files(self, ckpt_uuid: str, relpaths: list[str], dst: Path) -> None:
        root = self._existing(ckpt_uuid)
        real_root = root.resolve()
        for rel in relpaths:
            source = root.joinpath(*PurePosixPath(rel).parts)
            real = source.resolve()
            if ".." in PurePosixPath(rel).parts or rel.startswith("/") or real_root not in real.parents \
                    or not real.is_file():
                raise CheckpointNotFound(f"checkpoint {ckpt_uuid} has no file {rel!r} in {self.base}")
            target = safe_destination(Path(dst), rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real, target)

    @contextlib.contextmanager
    def restore_path(self, ckpt_uuid: str) -> Iterator[Path]:
        yield self._existing(ckpt_uuid)

    def delete(self, ckpt_uuid: str) -> None:
        # a published checkpoint is read-only
        def writable_again(func: Callable[..., Any], target: str, exc_info: Any) -> None:
            if isinstance(exc_info[1], FileNotFoundError):
                return
            if not isinstance(exc_info[1], PermissionError):
                raise exc_info[1]
            os.chmod(os.path.dirname(target), 0o700)
            if func is os.rmdir or func is os.unlink:
                func(target)
            else:
                shutil.rmtree(target)

        final = self._final(ckpt_uuid)
        if final.is_dir() and not final.is_symlink():  # already gone: deleting is idempotent
            shutil.rmtree(final, onerror=writable_again)

    def delete_files(self, ckpt_uuid: str, relpaths: list[str]) -> None:
        root = self._final(ckpt_uuid)
        if not root.is_dir() or root.is_symlink():
            return
        real_root = root.resolve()
        parents: set[Path] = set()
        for rel in relpaths:
            parts = PurePosixPath(rel).parts
            if not parts or rel.startswith("/") or ".." in parts:
                continue  # never outside the checkpoint
            target = root.joinpath(*parts)
            real_parent = target.parent.resolve()
            if real_parent != real_root and real_root not in real_parent.parents:
                continue  # a directory link leading out of it
            if target.is_symlink() or target.is_file():
                try:
                    target.unlink()
                except PermissionError:  # a published checkpoint is read-only
                    os.chmod(target.parent, 0o700)
                    target.unlink()
                except FileNotFoundError:
                    pass
            parents.update(p for p in target.parents if p != root and root in p.parents)
        for directory in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if now empty

    def resources(self, ckpt_uuid: str) -> dict[str, int]:
        return directory_resources(self._existing(ckpt_uuid))

    def list_checkpoints(self) -> list[str]:
        if not self.base.is_dir():
            return []
        return sorted(p.name for p in self.base.iterdir()
                      if p.is_dir() and _STAGING not in p.name and not p.name.startswith("."))

    def _existing(self, ckpt_uuid: str) -> Path:
        path = self._final(ckpt_uuid)
        if not path.is_dir():
            raise CheckpointNotFound(f"checkpoint {ckpt_uuid} not found in {self.base} (deleted, or never stored)")
        return path
