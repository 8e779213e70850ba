"""The agent holds context members to the same name rules as the CLI and the master."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from agent_image.agent.safe_untar import UnsafeArchiveError, safe_extract


def tgz(members: list[tuple[str, str]]) -> bytes:
    """(name, kind) pairs, kind 'f' (file), 'd' (directory) or 'l:<target>' (symlink)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind.startswith("l:"):
                info.type = tarfile.SYMTYPE
                info.linkname = kind[2:]
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


@pytest.mark.parametrize(("members", "named"), [
    ([("C:evil", "f")], "C:evil"),
    ([("a\\b", "f")], "a\\\\b"),
    ([("a/./b", "f")], "a/./b"),
    ([("x", "f"), ("x/y", "f")], "'x'"),
    ([("x", "f"), ("x", "f")], "'x'"),
    ([("n" * 256, "f")], "n" * 256),
    ([("l", "l:sub"), ("sub", "d"), ("l/f", "f")], "'l'"),
    ([("d", "d"), ("d/l1", "l:.."), ("d/l2", "l:l1/../..")], "d/l2"),
])
def test_bad_names_are_refused_before_anything_is_written(tmp_path: Path, members, named):
    dest = tmp_path / "ctx"
    with pytest.raises(UnsafeArchiveError) as e:
        safe_extract(tgz([("ok.py", "f"), *members]), dest)
    assert named in str(e.value)
    assert not (dest / "ok.py").exists()


def test_links_inside_are_extracted(tmp_path: Path):
    dest = tmp_path / "ctx"
    safe_extract(tgz([("lib", "d"), ("lib/u.py", "f"), ("u.py", "l:lib/u.py"), ("lib/up", "l:../u.py")]), dest)
    assert (dest / "u.py").read_bytes() == b"x" and (dest / "lib/up").read_bytes() == b"x"
