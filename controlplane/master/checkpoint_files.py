"""A reported ``shared_fs`` checkpoint's files: published out of the task's reach, read-only, digested.

A task writes its checkpoints into its allocation's staging directory
(``<host_path>/.staging/<allocation id>/[<storage_path>/]<uuid>``, the only part of host_path it
sees, read-write: ``agent_image/agent/sandbox.py``). When the checkpoint is reported complete the
master renames it to ``<host_path>/[<storage_path>/]<uuid>`` (same file system), which no task sees
except read-only, then makes it read-only (directories 0555, files 0444, owned by the master's
user where it may chown, so the task's uid owns nothing in it) and records a sha256 per file.
A checkpoint already at its final place (an agent without a sandbox, a report off the cluster) is
made read-only and digested where it is. Directory by directory, the directory is closed first
(chown, then its files), so nothing new can be added to it while it is read; a file with another
hard link is replaced by a copy, so no link the task keeps reaches the stored file; a symbolic
link or any other special file refuses the report (a link could make the master read its own files
for a download).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.master.errors import ApiError, BadRequest, Conflict
from controlplane.storage.base import check_uuid
from controlplane.storage.digests import sha256_file
from controlplane.storage.shared_fs import staging_dir, storage_subdir


def shared_fs_places(storage: dict[str, Any], allocation_id: str, ckpt_uuid: str) -> tuple[Path, Path | None] | None:
    """(final directory, staged directory or None) of a ``shared_fs`` checkpoint; None for another storage."""
    if storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return None
    host = Path(str(storage["host_path"]))
    sub = storage_subdir(storage.get("storage_path"))
    if sub is None:
        return None
    final = host / sub / check_uuid(ckpt_uuid)
    staged = staging_dir(host, allocation_id) / sub / ckpt_uuid if allocation_id else None
    return final, staged


class PublishFailed(ApiError):
    """The master could not move or lock down a checkpoint's files (its own file system's fault,
    such as a host_path it may not write): the report is not stored, and the task may retry it."""

    status = 503


def publish(final: Path, staged: Path | None, ckpt_uuid: str) -> dict[str, str] | None:
    """Blocking. Moves the staged checkpoint into place, makes it read-only and returns its files'
    sha256; None when there are no files in either place (nothing to verify later)."""
    try:
        return _publish(final, staged, ckpt_uuid)
    except OSError as e:
        raise PublishFailed(f"checkpoint {ckpt_uuid}: the master could not publish its files "
                            f"({e.strerror or type(e).__name__}: {e.filename or final})") from e


def _publish(final: Path, staged: Path | None, ckpt_uuid: str) -> dict[str, str] | None:
    if staged is not None and staged.is_dir() and not staged.is_symlink():
        if os.path.lexists(final):
            raise Conflict(f"uuid: checkpoint {ckpt_uuid} already exists in storage")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, final)
    if not final.is_dir() or final.is_symlink():
        return None
    return _lock_down(final, ckpt_uuid)


def _lock_down(root: Path, ckpt_uuid: str) -> dict[str, str]:
    owner = (os.geteuid(), os.getegid()) if os.geteuid() == 0 else None
    digests: dict[str, str] = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        if owner is not None:
            os.chown(directory, *owner, follow_symlinks=False)
        os.chmod(directory, 0o755 if owner is not None else 0o700)  # nobody else adds anything now
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = Path(entry.path)
            rel = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BadRequest(f"resources: checkpoint {ckpt_uuid} file {rel!r} is not a regular file "
                                 "(a symbolic link or a special file); a checkpoint holds files and directories")
            if st.st_nlink > 1:  # another link (the task may keep one) must not reach the stored file
                copy = path.with_name(f".{path.name}.copy")
                shutil.copyfile(path, copy, follow_symlinks=False)
                os.replace(copy, path)
            if owner is not None:
                os.chown(path, *owner, follow_symlinks=False)
            os.chmod(path, 0o444)
            digests[rel] = sha256_file(path)
        os.chmod(directory, 0o555)
    return dict(sorted(digests.items()))


def remove_staging(storage: dict[str, Any], allocation_ids: list[str]) -> None:
    """Blocking. Removes what an ended experiment's allocations left in their shared_fs staging
    directories (a checkpoint written but never reported, the mount points of what they read)."""
    if storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return
    for allocation_id in allocation_ids:
        path = staging_dir(Path(str(storage["host_path"])), allocation_id)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, onerror=_writable_again)


def _writable_again(func: Callable[..., Any], target: str, exc_info: Any) -> None:  # shutil.rmtree's onerror
    """A directory a task left without write permission (or a published one) is opened to be emptied."""
    if isinstance(exc_info[1], FileNotFoundError):
        return
    if not isinstance(exc_info[1], PermissionError):
        raise exc_info[1]
    os.chmod(os.path.dirname(target), 0o700)
    if func in (os.rmdir, os.unlink):
        func(target)
    else:
        shutil.rmtree(target)
