"""The checkpoint storage interface every backend implements, and small shared helpers."""

from __future__ import annotations

import abc
import contextlib
import os
from pathlib import Path


class StorageManager(abc.ABC):
    """Where checkpoints live: each one a tree of files under a checkpoint uuid.

    The contract, for every backend (tests/controlplane/storage runs each through it):

    - ``store_path(uuid)`` yields a local directory to write into. On a clean exit every file is
      in the store before it returns, so the caller may report the checkpoint. If the body raises,
      nothing is stored. If the upload fails, a ``StorageError`` is raised and what was already
      uploaded under that uuid is deleted (best effort: the message says if some may remain).
    - ``upload_dir(src, uuid)`` stores a finished directory the same way; ``src`` is left as is.
    - ``download(uuid, dst)`` copies every file into ``dst`` (created if needed).
    - ``download_files(uuid, relpaths, dst)`` copies only those files of it into ``dst`` (their
      relative paths kept); one that is not stored is ``CheckpointNotFound``.
    - ``restore_path(uuid)`` yields a local directory holding the files; treat it as read-only
      (it may be the stored directory itself, or a temporary copy removed on exit).
    - ``delete(uuid)`` removes the checkpoint; deleting a missing one is not an error.
    - ``delete_files(uuid, relpaths)`` removes those files of it (``det checkpoint rm --glob``);
      missing ones are not an error, and a directory left empty goes too.
    - ``resources(uuid)`` is ``{relpath: size in bytes}`` as the store has it.
    - ``list_checkpoints()`` is the sorted uuids present in the store.

    ``download``, ``download_files``, ``restore_path`` and ``resources`` raise ``CheckpointNotFound``
    for a uuid that is not stored. Every failure is a ``StorageError`` subclass (``controlplane.storage.errors``).
    """

    @abc.abstractmethod
    def store_path(self, ckpt_uuid: str) -> contextlib.AbstractContextManager[Path]: ...

    @abc.abstractmethod
    def upload_dir(self, src: Path, ckpt_uuid: str) -> None: ...

    @abc.abstractmethod
    def download(self, ckpt_uuid: str, dst: Path) -> None: ...

    @abc.abstractmethod
    def download_files(self, ckpt_uuid: str, relpaths: list[str], dst: Path) -> None: ...

    @abc.abstractmethod
    def restore_path(self, ckpt_uuid: str) -> contextlib.AbstractContextManager[Path]: ...

    @abc.abstractmethod
    def delete(self, ckpt_uuid: str) -> None: ...

    @abc.abstractmethod
    def delete_files(self, ckpt_uuid: str, relpaths: list[str]) -> None: ...

    @abc.abstractmethod
    def resources(self, ckpt_uuid: str) -> dict[str, int]: ...

    @abc.abstractmethod
    def list_checkpoints(self) -> list[str]: ...


def check_uuid(ckpt_uuid: str) -> str:
    """A checkpoint id is one path component: it names a directory or a key prefix."""
    if not ckpt_uuid or "/" in ckpt_uuid or "\\" in ckpt_uuid or ckpt_uuid in (".", ".."):
        raise ValueError(f"not a checkpoint uuid: {ckpt_uuid!r}")
    return ckpt_uuid


def local_files(root: Path) -> dict[str, Path]:
    """Every file under ``root`` as {posix relpath: path}."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p
    return out


def directory_resources(root: Path) -> dict[str, int]:
    """{relpath: size} of every file under ``root``."""
    return {rel: p.stat().st_size for rel, p in local_files(root).items()}


def safe_destination(dst: Path, relpath: str) -> Path:
    """``dst/relpath``, refusing a stored name that would land outside ``dst``."""
    target = (dst / relpath).resolve()
    if dst.resolve() not in target.parents:
        raise ValueError(f"stored file name {relpath!r} escapes the download directory")
    return target
