"""The model-definition upload: a directory turned into Determined's `v1File` list.

Determined sends the context as a JSON list of base64 files (reference §2.2), honoring
`.detignore` (gitignore syntax) on top of fixed defaults, and refuses a context over 95 MiB
before sending anything. We stat first and read later, so an oversized context is refused
without reading it, and the message names the five largest files so the user knows what to
add to `.detignore`.
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pathspec

from controlplane.cli.errors import CliError
from controlplane.cli.render import format_size

MAX_CONTEXT_SIZE = 95 * 1024 * 1024  # Determined's MAX_CONTEXT_SIZE: 96 MiB - 1 MiB
TYPE_FILE = 48  # ord(tarfile.REGTYPE)
TYPE_DIR = 53  # ord(tarfile.DIRTYPE)
DEFAULT_IGNORES = [
    "__pycache__/", "*.py[co]", "*$py.class", "terraform", "terraform_data", "terraform.tfstate*",
    "terraform.tfvars*", ".terraform*", ".git/", ".vscode/", ".idea/", ".mypy_cache/", "/shared_fs",
]
DETIGNORE = ".detignore"


@dataclass(frozen=True)
class Entry:
    relpath: str
    abspath: Path
    is_dir: bool
    size: int
    mode: int
    mtime: int


def _spec(root: Path) -> pathspec.PathSpec:
    lines = list(DEFAULT_IGNORES)
    ignore_file = root / DETIGNORE
    if ignore_file.is_file():
        try:
            lines += ignore_file.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"cannot read {ignore_file}: {e}") from None
    # GitIgnoreSpec is gitwildmatch with git's own precedence rules (pathspec >= 0.10; the bare
    # GitWildMatchPattern factory is deprecated in pathspec 1.x).
    return pathspec.GitIgnoreSpec.from_lines(lines)


def scan(root: Path) -> list[Entry]:
    """Every entry to send, in os.walk order (a directory's subdirectories, then its files)."""
    if not root.is_dir():
        raise CliError(f"context directory {root} does not exist or is not a directory")
    spec = _spec(root)
    entries: list[Entry] = []

    def onerror(err: OSError) -> None:
        raise CliError(f"cannot read {err.filename}: {err.strerror}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        here = Path(dirpath)
        rel_here = here.relative_to(root).as_posix()
        prefix = "" if rel_here == "." else rel_here + "/"
        kept_dirs = []
        for name in sorted(dirnames):
            rel = prefix + name
            path = here / name
            if spec.match_file(rel + "/") or path.is_symlink():
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
            try:
                st = path.stat()
            except OSError as e:
                raise CliError(f"cannot read {path}: {e.strerror}") from None
            if not stat.S_ISREG(st.st_mode):
                continue
            entries.append(Entry(rel, path, False, st.st_size, st.st_mode, int(st.st_mtime)))
    return entries


def check_size(entries: list[Entry], limit: int = MAX_CONTEXT_SIZE) -> int:
    total = sum(e.size for e in entries)
    if total > limit:
        largest = sorted((e for e in entries if not e.is_dir), key=lambda e: e.size, reverse=True)[:5]
        listing = "\n".join(f"  {format_size(e.size):>10}  {e.relpath}" for e in largest)
        raise CliError(
            f"the context directory is {format_size(total)}, over the {format_size(limit)} limit; "
            f"the largest files are:\n{listing}\nlist files the trial does not need in {DETIGNORE}")
    return total


def to_v1_files(entries: list[Entry]) -> list[dict]:
    files = []
    for e in entries:
        if e.is_dir:
            content = ""
        else:
            try:
                content = base64.b64encode(e.abspath.read_bytes()).decode("ascii")
            except OSError as err:
                raise CliError(f"cannot read {e.abspath}: {err.strerror}") from None
        files.append({"path": e.relpath, "type": TYPE_DIR if e.is_dir else TYPE_FILE, "content": content,
                      "mode": e.mode, "mtime": str(e.mtime), "uid": 0, "gid": 0})
    return files


def collect(root: Path, limit: int = MAX_CONTEXT_SIZE) -> list[dict]:
    """Scan, refuse if too big, then read: the `modelDefinition` of a create request."""
    entries = scan(root)
    check_size(entries, limit)
    return to_v1_files(entries)
