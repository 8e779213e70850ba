"""The model-definition upload: a directory turned into Determined's `v1File` list.

Determined sends the context as a JSON list of base64 files (reference §2.2), honoring
`.detignore` (gitignore syntax) on top of fixed defaults, and refuses a context over 95 MiB
before sending anything. We stat first and read later, so an oversized context is refused
without reading it, and the message names the five largest files so the user knows what to
add to `.detignore`.

Names follow the rules the master and the agent share (``controlplane.common.context_names``),
checked here before anything is read or sent. A symlink is sent as a link (type 50, its
target as content) when what it resolves to is inside the context, and refused, naming it,
when it leads outside: the target's bytes are never uploaded in its place.
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from controlplane.cli.errors import CliError
from controlplane.cli.render import format_size
from controlplane.common import context_names as names
from controlplane.common.detignore import DETIGNORE, ignore_spec

MAX_CONTEXT_SIZE = names.MAX_CONTEXT_BYTES  # Determined's MAX_CONTEXT_SIZE: 96 MiB - 1 MiB
TYPE_FILE = 48  # ord(tarfile.REGTYPE)
TYPE_SYMLINK = 50  # ord(tarfile.SYMTYPE)
TYPE_DIR = 53  # ord(tarfile.DIRTYPE)


@dataclass(frozen=True)
class Entry:
    relpath: str
    abspath: Path
    is_dir: bool
    size: int
    mode: int
    mtime: int
    link_target: str | None = None  # a symlink's target, relative to its directory

    @property
    def kind(self) -> str:
        return names.SYMLINK if self.link_target is not None else names.DIRECTORY if self.is_dir else names.FILE


def _spec(root: Path) -> pathspec.PathSpec[Any]:
    try:
        return ignore_spec(root)
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {root / DETIGNORE}: {e}") from None


def scan(root: Path) -> list[Entry]:
    """Every entry to send, in os.walk order (a directory's subdirectories, then its files)."""
    if not root.is_dir():
        raise CliError(f"context directory {root} does not exist or is not a directory")
    spec = _spec(root)
    entries: list[Entry] = []

    def onerror(err: OSError) -> None:
        raise CliError(f"cannot read {err.filename}: {err.strerror}")

    real_root = os.path.realpath(root)

    def link(rel: str, path: Path) -> Entry:
        resolved = os.path.realpath(path)
        if resolved != real_root and not resolved.startswith(real_root.rstrip(os.sep) + os.sep):
            raise CliError(f"the symlink {rel} points outside the context directory (to {resolved}); "
                           f"replace it with a copy, or list it in {DETIGNORE}")
        target = os.path.relpath(resolved, os.path.realpath(path.parent)).replace(os.sep, "/")
        st = path.lstat()
        return Entry(rel, path, False, len(target.encode()), st.st_mode, int(st.st_mtime), target)

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        here = Path(dirpath)
        rel_here = here.relative_to(root).as_posix()
        prefix = "" if rel_here == "." else rel_here + "/"
        kept_dirs = []
        for name in sorted(dirnames):
            rel = prefix + name
            path = here / name
            if path.is_symlink():
                if not spec.match_file(rel) and not spec.match_file(rel + "/"):
                    entries.append(link(rel, path))
                continue
            if spec.match_file(rel + "/"):
                continue
            st = path.stat()
            kept_dirs.append(name)
            entries.append(Entry(rel, path, True, 0, st.st_mode, int(st.st_mtime)))
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = prefix + name
            if rel == DETIGNORE or spec.match_file(rel):
                continue
            path = here / name
            if path.is_symlink():
                entries.append(link(rel, path))
                continue
            try:
                st = path.stat()
            except OSError as e:
                raise CliError(f"cannot read {path}: {e.strerror}") from None
            if not stat.S_ISREG(st.st_mode):
                continue
            entries.append(Entry(rel, path, False, st.st_size, st.st_mode, int(st.st_mtime)))
    try:
        names.check_entries(names.Entry(e.relpath, e.kind, e.link_target or "") for e in entries)
    except names.BadContextEntry as e:
        where = f"{e.name}: " if e.name else ""
        raise CliError(f"cannot send the context: {where}{e.problem}; rename it or list it in {DETIGNORE}") from None
    return entries


def check_size(entries: list[Entry], limit: int = MAX_CONTEXT_SIZE) -> int:
    """Each entry counts its header (``names.ENTRY_COST``) as well as its bytes, as the master does."""
    total = sum(names.entry_cost(e.size) for e in entries)
    if total > limit:
        largest = sorted((e for e in entries if not e.is_dir), key=lambda e: e.size, reverse=True)[:5]
        listing = "\n".join(f"  {format_size(e.size):>10}  {e.relpath}" for e in largest)
        raise CliError(
            f"the context directory is {format_size(total)}, over the {format_size(limit)} limit; "
            f"the largest files are:\n{listing}\nlist files the trial does not need in {DETIGNORE}")
    return total


def to_v1_files(entries: list[Entry]) -> list[dict[str, Any]]:
    files = []
    for e in entries:
        if e.is_dir:
            content = ""
        elif e.link_target is not None:
            content = base64.b64encode(e.link_target.encode()).decode("ascii")
        else:
            try:
                content = base64.b64encode(e.abspath.read_bytes()).decode("ascii")
            except OSError as err:
                raise CliError(f"cannot read {e.abspath}: {err.strerror}") from None
        kind = TYPE_SYMLINK if e.link_target is not None else TYPE_DIR if e.is_dir else TYPE_FILE
        files.append({"path": e.relpath, "type": kind, "content": content,
                      "mode": e.mode, "mtime": str(e.mtime), "uid": 0, "gid": 0})
    return files


def collect(root: Path, limit: int = MAX_CONTEXT_SIZE) -> list[dict[str, Any]]:
    """Scan, refuse if too big, then read: the `modelDefinition` of a create request."""
    entries = scan(root)
    check_size(entries, limit)
    return to_v1_files(entries)
