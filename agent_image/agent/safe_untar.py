"""Unpack a model-definition tarball without letting it write outside the target directory.

The context comes from users through the master, so members with absolute paths, ``..``
components, links that point outside, or device files are refused before anything is written.
Names are also held to the rules the CLI and the master apply (``context_names``: drive names,
backslashes, ``.``, over-long components, duplicates, a file ``x`` beside ``x/y``...), so what
the master accepted the agent can create, and what it refused never reaches here.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath

from controlplane.common import context_names as names


class UnsafeArchiveError(ValueError):
    """The archive holds a member that would escape the destination."""


def _inside(root: Path, candidate: Path) -> bool:
    try:
        candidate.relative_to(root)
    except ValueError:
        return False
    return True


def check_member(member: tarfile.TarInfo, dest: Path) -> None:
    name = member.name
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"absolute path in context: {name!r}")
    if ".." in pure.parts:
        raise UnsafeArchiveError(f"'..' in context member: {name!r}")
    target = Path(os.path.normpath(dest / pure))
    if not _inside(dest, target):
        raise UnsafeArchiveError(f"member escapes the context directory: {name!r}")
    if member.issym():
        link = PurePosixPath(member.linkname)
        if link.is_absolute():
            raise UnsafeArchiveError(f"absolute symlink in context: {name!r} -> {member.linkname!r}")
        resolved = Path(os.path.normpath(target.parent / link))
        if not _inside(dest, resolved):
            raise UnsafeArchiveError(f"symlink points outside the context: {name!r} -> {member.linkname!r}")
    elif member.islnk():
        link = PurePosixPath(member.linkname)
        resolved = Path(os.path.normpath(dest / link))
        if link.is_absolute() or ".." in link.parts or not _inside(dest, resolved):
            raise UnsafeArchiveError(f"hard link points outside the context: {name!r} -> {member.linkname!r}")
    elif not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"unsupported member type in context: {name!r}")


def _kind(member: tarfile.TarInfo) -> str:
    return names.DIRECTORY if member.isdir() else names.SYMLINK if member.issym() else names.FILE


def check_names(members: list[tarfile.TarInfo]) -> None:
    try:
        names.check_entries(names.Entry(m.name, _kind(m), m.linkname if m.issym() else "") for m in members)
    except names.BadContextEntry as e:
        raise UnsafeArchiveError(f"context member {e}") from e


def safe_extract(tgz: bytes, dest: Path) -> None:
    """Extract gzip'd tar bytes into ``dest`` (created); empty bytes → empty directory."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    if not tgz:
        return
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:*") as tar:
        members = tar.getmembers()
        for member in members:
            check_member(member, root)
        check_names(members)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tar.extractall(root, members=members)
