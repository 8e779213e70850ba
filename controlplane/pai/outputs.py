"""What an OpenPAI task leaves in ``$PAI_OUTPUT_DIR``: where it is kept, and how it travels.

A task writes its outputs into ``$PAI_OUTPUT_DIR``, a directory of its own that its agent makes
(``agent_image/agent/pai_outputs.py``). When the task ends, however it ends, its agent sends what the
directory holds to the master as a tar stream (``tar_chunks``) and the master keeps it in the
cluster's checkpoint storage under the job (``read_tar``, then the storage's ``upload_dir``):

    <storage>/pai-outputs/<job's queue id>/<attempt>/<role>-<index>/<path>

``PAI_DEFAULT_FS_URI`` (``location_uri``) names ``<storage>/pai-outputs/<job's queue id>``:
``file:///host_path[/storage_path]/...`` for ``shared_fs`` (and ``directory``), ``s3://bucket/prefix/...``,
``gs://bucket/prefix/...``. A job's ``outputDir`` is only a name here (OpenPAI's HDFS path): the task
writes to ``$PAI_OUTPUT_DIR`` whatever it says.

Bounds, on both sides: at most ``MAX_FILES`` files and ``MAX_BYTES`` bytes per task, names of at most
``MAX_NAME`` characters and ``MAX_DEPTH`` directories; only regular files travel (a symlink is never
followed, a device, socket or FIFO never opened); what is left out is counted and said.

Pure apart from reading the directory (``scan``, ``tar_chunks``) and writing the master's own
temporary one (``read_tar``): no master, no agent, no network.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from controlplane.config.storage_choices import PAI_OUTPUTS_DIR

OUTPUTS_DIR = PAI_OUTPUTS_DIR  # the config refuses it as an experiment's sub-path
MAX_FILES = 10_000
MAX_BYTES = 1 << 30  # per task
MAX_NAME = 1024  # a file's path under $PAI_OUTPUT_DIR, in characters
MAX_DEPTH = 32
BLOCK = 512
CHUNK = 1 << 20
# What a tar of MAX_FILES files of MAX_BYTES in all may add: a header, a PAX header for a long name
# and padding per file, and the end-of-archive blocks (the master's cap on the request body).
MAX_TAR_BYTES = MAX_BYTES + MAX_FILES * 4 * BLOCK + 1024 * 1024


def task_name(role: str, index: int) -> str:
    """``<role>-<index>``, as ``det pai ssh`` names tasks (a role name has no ``-``)."""
    return f"{role}-{index}"


def parse_task_name(text: str) -> tuple[str, int] | None:
    """``worker-0`` -> ("worker", 0); None for anything else."""
    role, dash, index = text.rpartition("-")
    if not dash or not role or "-" in role or not index.isdigit() or len(index) > 6:
        return None
    return role, int(index)


def _join(*parts: str | None) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def storage_config(base: dict[str, Any], job_key: str, attempt: int) -> dict[str, Any]:
    """The checkpoint storage config whose "checkpoint" ``<role>-<index>`` is one task's outputs of
    ``attempt``: ``base`` (the cluster's ``checkpoint_storage``) moved under ``pai-outputs/<job>/<attempt>``."""
    sub = _join(OUTPUTS_DIR, job_key, str(attempt))
    cfg = dict(base)
    kind = cfg.get("type")
    if kind == "shared_fs":
        cfg["storage_path"] = _join(cfg.get("storage_path"), sub)
    elif kind == "directory":
        cfg["container_path"] = str(Path(str(cfg.get("container_path") or "")) / sub)
    elif kind in ("s3", "gcs"):
        cfg["prefix"] = _join(cfg.get("prefix"), sub)
    else:
        raise ValueError(f"checkpoint_storage.type {kind!r} cannot keep OpenPAI outputs "
                         "(shared_fs, directory, s3, gcs)")
    return cfg


def location_uri(base: dict[str, Any], job_key: str) -> str:
    """Where the job's outputs are kept, as a URI: what ``PAI_DEFAULT_FS_URI`` says."""
    kind = base.get("type")
    if kind in ("shared_fs", "directory"):
        root = Path(str(base.get("host_path") if kind == "shared_fs" else base.get("container_path") or ""))
        path = root / _join(base.get("storage_path") if kind == "shared_fs" else "", OUTPUTS_DIR, job_key)
        return "file://" + path.as_posix()
    if kind in ("s3", "gcs"):
        scheme = "s3" if kind == "s3" else "gs"
        return f"{scheme}://{base.get('bucket')}/{_join(base.get('prefix'), OUTPUTS_DIR, job_key)}"
    return ""


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be an output's path (None when it can): relative, no ``.``/``..`` or empty
    part, no NUL, valid UTF-8, at most MAX_NAME characters and MAX_DEPTH directories."""
    if not name or len(name) > MAX_NAME:
        return f"must have 1 to {MAX_NAME} characters"
    if "\x00" in name or name.startswith("/") or "\\" in name:
        return "must be a relative path without NUL or backslash"
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "must not have an empty, '.' or '..' part"
    if len(parts) > MAX_DEPTH + 1:
        return f"must be at most {MAX_DEPTH} directories deep"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "must be UTF-8"
    return None


# ---- the task's side: what is kept, and the tar stream --------------------------------------
@dataclass
class Scan:
    """The regular files of an output directory that fit the bounds, in path order, and what was left out."""

    files: list[tuple[str, int]] = field(default_factory=list)
    total: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> count
    left_out_bytes: int = 0

    def note(self, reason: str, size: int = 0) -> None:
        self.left_out[reason] = self.left_out.get(reason, 0) + 1
        self.left_out_bytes += size

    def left_out_words(self) -> str:
        """``"2 symlinks (never followed), 1 file over the 1.0 GiB cap"``; empty when nothing was."""
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self.left_out.items()))


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def size_words(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def scan(root: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Scan:
    """Walks ``root`` without following a symlink anywhere (each directory opened relative to its
    parent with O_NOFOLLOW): regular files kept in path order while they fit ``max_files`` and
    ``max_bytes``. ``root`` itself must be a directory, not a link (OSError otherwise)."""
    out = Scan()
    fd = os.open(root, _DIR_FLAGS)
    try:
        _walk(fd, "", 0, out, max_files, max_bytes)
    finally:
        os.close(fd)
    return out


def _walk(dir_fd: int, prefix: str, depth: int, out: Scan, max_files: int, max_bytes: int) -> None:
    with os.scandir(dir_fd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            out.note("files that vanished while read")
            continue
        if stat.S_ISLNK(st.st_mode):
            out.note("symlinks (never followed)")
        elif stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                out.note(f"directories deeper than {MAX_DEPTH}")
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                out.note("directories that could not be read")
                continue
            try:
                _walk(sub, rel + "/", depth + 1, out, max_files, max_bytes)
            finally:
                os.close(sub)
        elif not stat.S_ISREG(st.st_mode):
            out.note("devices, sockets or FIFOs")
        elif check_name(rel) is not None:
            out.note("files with names that cannot be kept (too long, or not UTF-8)", st.st_size)
        elif len(out.files) >= max_files:
            out.note(f"files over the cap of {max_files} files", st.st_size)
        elif out.total + st.st_size > max_bytes:
            out.note(f"files over the cap of {size_words(max_bytes)}", st.st_size)
        else:
            out.files.append((rel, st.st_size))
            out.total += st.st_size


def _open_file(root_fd: int, rel: str) -> int:
    """``rel`` under ``root_fd``, every part opened with O_NOFOLLOW: never a link's target."""
    parts = rel.split("/")
    fd = root_fd
    opened: list[int] = []
    try:
        for part in parts[:-1]:
            fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            opened.append(fd)
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        for d in opened:
            os.close(d)


def _header(rel: str, size: int, mode: int, mtime: float) -> bytes:
    info = tarfile.TarInfo(rel)
    info.size = size
    info.mode = mode & 0o755 | 0o600
    info.mtime = int(mtime)
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def tar_chunks(root: Path, found: Scan) -> Iterator[bytes]:
    """A tar stream (PAX) of ``found``'s files under ``root``, each exactly the size ``scan`` saw (cut
    or padded with zeros if it changed since): at most about MAX_TAR_BYTES whatever the directory
    does meanwhile. A file that is no longer a regular file is sent empty."""
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        for rel, size in found.files:
            try:
                fd = _open_file(root_fd, rel)
            except OSError:
                fd = -1
            try:
                st = os.fstat(fd) if fd >= 0 else None
                if st is None or not stat.S_ISREG(st.st_mode):
                    yield _header(rel, 0, 0o644, 0)
                    continue
                yield _header(rel, size, st.st_mode, st.st_mtime)
                left = size
                while left > 0:
                    data = os.read(fd, min(CHUNK, left))
                    if not data:
                        break
                    left -= len(data)
                    yield data
                if left:
                    yield bytes(left)
                if size % BLOCK:
                    yield bytes(BLOCK - size % BLOCK)
            finally:
                if fd >= 0:
                    os.close(fd)
        yield bytes(2 * BLOCK)
    finally:
        os.close(root_fd)


# ---- the master's side: a received tar, checked, into a directory of its own ----------------
class OutputsRefused(ValueError):
    """The tar is not one ``tar_chunks`` could have sent (the message says why)."""


@dataclass(frozen=True)
class KeptFile:
    path: str
    size: int
    sha256: str


def read_tar(fileobj: IO[bytes], dst: Path, max_files: int = MAX_FILES,
             max_bytes: int = MAX_BYTES) -> list[KeptFile]:
    """Writes every file of the tar into ``dst`` (an empty directory of the caller's) and returns them
    with their sizes and sha256. Refuses (OutputsRefused) anything but regular files with names
    ``check_name`` accepts, a name given twice or under another file, and more than ``max_files``
    files or ``max_bytes`` bytes."""
    kept: list[KeptFile] = []
    seen: set[str] = set()
    total = 0
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as tar:
            for member in tar:
                name = member.name
                problem = check_name(name)
                if problem is not None:
                    raise OutputsRefused(f"{name[:200]!r}: a file's path {problem}")
                if not member.isreg():
                    raise OutputsRefused(f"{name!r}: only regular files are kept")
                if name in seen or any(str(p) in seen for p in PurePosixPath(name).parents):
                    raise OutputsRefused(f"{name!r}: given twice, or under a file of that name")
                seen.add(name)
                total += member.size
                if len(kept) >= max_files:
                    raise OutputsRefused(f"more than {max_files} files")
                if total > max_bytes:
                    raise OutputsRefused(f"more than {max_bytes} bytes")
                source = tar.extractfile(member)
                assert source is not None
                kept.append(_write(dst, name, source, member.size))
    except tarfile.TarError as e:
        raise OutputsRefused(f"not a tar stream: {e}") from None
    return kept


def _write(dst: Path, name: str, source: IO[bytes], size: int) -> KeptFile:
    target = dst.joinpath(*name.split("/"))
    if target.parent != dst:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise OutputsRefused(f"{name!r}: under a file of that name") from None
    digest = hashlib.sha256()
    written = 0
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except (FileExistsError, IsADirectoryError):
        raise OutputsRefused(f"{name!r}: given twice, or a directory of that name exists") from None
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            written += len(chunk)
    if written != size:
        raise OutputsRefused(f"{name!r}: the stream ended inside the file")
    return KeptFile(name, size, digest.hexdigest())
