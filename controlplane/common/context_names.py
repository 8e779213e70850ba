"""Which context entries every part accepts: one set of rules for the CLI, the master and the agent.

The agent unpacks the context on Linux, so an entry the agent cannot create, or one that would
land outside the context directory, is refused where it is first seen (the CLI before upload,
the master at create with a 400 naming it) instead of failing the trial with empty logs:
drive names and backslashes, absolute paths, empty, ``.`` or ``..`` components, NUL, names that
are not UTF-8, a component over 255 bytes or a path over 4096, duplicates, a file ``x`` beside
``x/y``, and links whose target leaves the context.

Each entry also costs ``ENTRY_COST`` bytes of the ``MAX_CONTEXT_BYTES`` budget (its tar header),
and there are at most ``MAX_ENTRIES``, so 200,000 empty directories do not pass as "0 bytes".
Every check is linear in the size of the names and runs mostly in C (no per-component loops
except for link targets that climb with ``..``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_CONTEXT_BYTES = 96 * 1024 * 1024 - 1024 * 1024  # Determined's MAX_CONTEXT_SIZE
ENTRY_COST = 512  # one tar header
MAX_ENTRIES = 100_000
MAX_COMPONENT_BYTES = 255  # NAME_MAX
MAX_PATH_BYTES = 4096  # PATH_MAX

FILE, DIRECTORY, SYMLINK = "file", "directory", "symlink"
_DRIVE = re.compile(r"^[A-Za-z]:")


class BadContextEntry(ValueError):
    """An entry the rules refuse; ``name`` is the entry's path as given, ``index`` its position."""

    def __init__(self, name: str, problem: str, index: int | None = None) -> None:
        self.name = name
        self.problem = problem
        self.index = index
        super().__init__(f"{name!r}: {problem}")


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # FILE, DIRECTORY or SYMLINK
    target: str = ""  # a symlink's target


def entry_cost(content_bytes: int) -> int:
    return ENTRY_COST + content_bytes


def name_problem(name: object) -> str | None:
    """Why the agent could not create this path inside the context, or None."""
    if not isinstance(name, str) or not name:
        return "the path must be a non-empty string"
    if "\x00" in name:
        return "contains a NUL character"
    if "\\" in name:
        return "contains a backslash (paths use '/')"
    if name.startswith("/"):
        return "is an absolute path (escapes the context)"
    if _DRIVE.match(name):
        return "starts with a drive name like C: (it would escape the context on Windows)"
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if len(raw) > MAX_PATH_BYTES:
        return f"is {len(raw)} bytes long, over the {MAX_PATH_BYTES}-byte path limit"
    if name.endswith("/") or "//" in name:
        return "has an empty path component"
    wrapped = f"/{name}/"
    if "/../" in wrapped:
        return "has a '..' component (escapes the context)"
    if "/./" in wrapped:
        return "has a '.' component"
    if len(raw) > MAX_COMPONENT_BYTES and max(map(len, raw.split(b"/"))) > MAX_COMPONENT_BYTES:
        return f"has a component over {MAX_COMPONENT_BYTES} bytes"
    return None


def target_problem(name: str, target: object, links: set[str]) -> str | None:
    """Why a symlink at ``name`` pointing at ``target`` could lead out of the context, or None.

    Relative targets only. Without ``..`` a target cannot climb; with it, each step is followed
    lexically, and a ``..`` right after another link of the context is refused (that link may point
    anywhere inside, so where ``..`` lands cannot be known from the names)."""
    if not isinstance(target, str) or not target:
        return "is a link with an empty target"
    if "\x00" in target or "\\" in target:
        return "is a link whose target contains a NUL or a backslash"
    if target.startswith("/") or _DRIVE.match(target):
        return f"is a link to an absolute path ({target})"
    if len(target.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"is a link whose target is over {MAX_PATH_BYTES} bytes"
    if "/../" not in f"/{target}/":
        return None
    parts = name.split("/")[:-1]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            parts.append(part)
        elif not parts:
            return f"is a link that points outside the context ({target})"
        elif "/".join(parts) in links:
            return f"is a link whose target goes through another link and then '..' ({target})"
        else:
            parts.pop()
    return None


def check_entries(entries: Iterable[Entry]) -> None:
    """Raise BadContextEntry for the first entry the rules refuse (see the module docstring)."""
    entries = list(entries)
    if len(entries) > MAX_ENTRIES:
        raise BadContextEntry("", f"the context has {len(entries)} entries, over the limit of {MAX_ENTRIES}")
    for i, e in enumerate(entries):
        problem = name_problem(e.name)
        if problem:
            raise BadContextEntry(e.name, problem, i)
    links = {e.name for e in entries if e.kind == SYMLINK}
    for i, e in enumerate(entries):
        if e.kind == SYMLINK:
            problem = target_problem(e.name, e.target, links)
            if problem:
                raise BadContextEntry(e.name, problem, i)
    # Sorted with '/' as the lowest character, every path under `x/` comes right after `x`.
    ordered = sorted(range(len(entries)), key=lambda i: entries[i].name.replace("/", "\x00"))
    for p, c in zip(ordered, ordered[1:], strict=False):
        prev, cur = entries[p], entries[c]
        if cur.name == prev.name:
            raise BadContextEntry(cur.name, "appears twice", max(p, c))
        if prev.kind != DIRECTORY and cur.name.startswith(prev.name + "/"):
            what = "a link" if prev.kind == SYMLINK else "a file"
            raise BadContextEntry(prev.name, f"is {what}, but {cur.name!r} needs it to be a directory", p)

