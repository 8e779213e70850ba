"""Finding the processes a test started, by parentage rather than by name: other clusters, or
other test runs, on the same machine may have the same words in their command lines."""

from __future__ import annotations

from pathlib import Path


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(p.name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren...), read from /proc."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
