"""A reported ``shared_fs`` checkpoint's files: published out of the task's reach, read-only, digested.

A task writes its checkpoints into its allocation's staging directory
(``<host_path>/.staging/<allocation id>/[<storage_path>/]<uuid>``, the only part of host_path it
sees, read-write: ``agent_image/agent/sandbox.py``; an agent without a sandbox points its tasks
there too). When the checkpoint is reported complete the master renames it to
``<host_path>/[<storage_path>/]<uuid>`` (same file system), which no task sees except read-only,
then makes it read-only (directories 0555, files 0444, owned by the master's user where it may
chown, so the task's uid owns nothing in it) and records a sha256 per file.

The master publishes only what the reporting allocation staged: it walks from the staging
directory to the checkpoint by directory descriptors, refusing a symbolic link on the way (a task
could otherwise point its staging path at any directory the master can reach and have it moved,
locked down and served), and renames from that descriptor. A report whose uuid was not staged and
whose final place already holds something is refused (409) without touching it; one with no files
anywhere is recorded with none (``Published.moved`` False: nothing the master may later serve or
delete). Directory by directory, the directory is closed first (chown, then its files), so nothing
new can be added to it while it is read; a file with another hard link is replaced by a copy, so no
link the task keeps reaches the stored file; a symbolic link or any other special file refuses the
report and the checkpoint goes back where it was staged (a link could make the master read its own
files for a download). ``Published.undo`` does the same when the report's transaction fails, so a
retry of the report finds it staged again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.master.errors import ApiError, BadRequest, Conflict
from controlplane.storage.base import check_uuid
from controlplane.storage.digests import sha256_file
from controlplane.storage.shared_fs import STAGING_DIR, staging_dir, storage_subdir


@dataclass(frozen=True)
class Places:
    """Where a shared_fs checkpoint is staged and where it is published."""

    host: Path
    sub: str  # storage_path inside host_path ("" for none)
    allocation_id: str  # "" for a report that names no allocation: nothing staged
    uuid: str

    @property
    def final(self) -> Path:
        return self.host / self.sub / self.uuid


def shared_fs_places(storage: dict[str, Any], allocation_id: str, ckpt_uuid: str) -> Places | None:
    """The places of a ``shared_fs`` checkpoint; None for another storage."""
    if storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return None
    sub = storage_subdir(storage.get("storage_path"))
    if sub is None:
        return None
    try:
        if allocation_id:
            check_uuid(allocation_id)
    except ValueError:
        raise BadRequest(f"allocationId: {allocation_id[:80]!r} is not an allocation id") from None
    return Places(Path(str(storage["host_path"])), sub, allocation_id, check_uuid(ckpt_uuid))


class PublishFailed(ApiError):
    """The master could not move or lock down a checkpoint's files (its own file system's fault,
    such as a host_path it may not write): the report is not stored, and the task may retry it."""

    status = 503


@dataclass
class Published:
    """What ``publish`` did: the files' sha256 (None: no files), whether it moved a staged directory
    into place, and, until ``close``, the staged directory's descriptor that ``undo`` moves it back by."""

    digests: dict[str, str] | None
    moved: bool
    places: Places | None = None
    _staged_parent: int | None = field(default=None, repr=False)

    def undo(self) -> None:
        """Blocking. Back into the staging directory (the report's transaction failed)."""
        try:
            if self.moved and self.places is not None and self._staged_parent is not None:
                with contextlib.suppress(OSError):  # best effort: the retry then reports it missing
                    os.rename(self.places.final, self.places.uuid, dst_dir_fd=self._staged_parent)
        finally:
            self.close()

    def close(self) -> None:
        if self._staged_parent is not None:
            os.close(self._staged_parent)
            self._staged_parent = None


def publish(places: Places) -> Published:
    """Blocking. Moves the checkpoint its allocation staged into place, makes it read-only and
    returns its files' sha256 (call ``close`` or ``undo`` on the answer)."""
    try:
        return _publish(places)
    except OSError as e:
        raise PublishFailed(f"checkpoint {places.uuid}: the master could not publish its files "
                            f"({e.strerror or type(e).__name__}: {e.filename or places.final})") from e


def _publish(places: Places) -> Published:
    final = places.final
    parent = _staged_parent(places)
    try:
        staged = _lstat_at(parent, places.uuid) if parent is not None else None
        if staged is None:
            if os.path.lexists(final):
                raise Conflict(f"uuid: checkpoint {places.uuid} was not staged by allocation "
                               f"{places.allocation_id or '(none named)'}, and storage already holds a "
                               f"{places.uuid!r}: the master publishes only what the reporting allocation staged")
            _close(parent)
            return Published(None, False)
        if not stat.S_ISDIR(staged.st_mode):
            raise BadRequest(f"uuid: the staged checkpoint {places.uuid} is not a directory (a symbolic link "
                             "or a file); a checkpoint is a directory of files")
        if os.path.lexists(final):
            raise Conflict(f"uuid: checkpoint {places.uuid} already exists in storage")
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(places.uuid, final, src_dir_fd=parent)
    except BaseException:
        _close(parent)
        raise
    published = Published(None, True, places, parent)
    try:
        if not stat.S_ISDIR(os.lstat(final).st_mode):  # swapped for a link after it was looked at
            raise BadRequest(f"uuid: the staged checkpoint {places.uuid} is not a directory")
        published.digests = _lock_down(final, places.uuid)
    except BaseException:
        published.undo()
        raise
    return published


def _staged_parent(places: Places) -> int | None:
    """A descriptor of ``<staging dir>/<storage_path>``, reached without following a link; None
    when there is none (no allocation named, nothing staged there)."""
    if not places.allocation_id:
        return None
    try:
        fd = os.open(places.host, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        for part in [STAGING_DIR, places.allocation_id, *[p for p in places.sub.split("/") if p]]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a symbolic link, or a file
                    raise BadRequest(f"storage_path: {part!r} in the allocation's staging directory is not a "
                                     "directory (a symbolic link or a file)") from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        _close(fd)
        raise
    return fd


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


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
