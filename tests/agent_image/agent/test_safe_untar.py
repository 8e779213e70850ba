"""Context unpacking refuses members that would escape the destination."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from agent_image.agent.safe_untar import UnsafeArchiveError, safe_extract


def make_tgz(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """(name, data, symlink target) triples → tgz bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                tar.addfile(info)
            else:
                payload = data or b""
                info.size = len(payload)
                info.mode = 0o755
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def test_extracts_normal_members(tmp_path: Path) -> None:
    dest = tmp_path / "ctx"
    safe_extract(make_tgz([("a.py", b"x", None), ("sub/b.txt", b"y", None), ("l", None, "a.py")]), dest)
    assert (dest / "a.py").read_bytes() == b"x"
    assert (dest / "sub/b.txt").read_bytes() == b"y"
    assert (dest / "l").resolve() == (dest / "a.py").resolve()


def test_empty_context_gives_empty_dir(tmp_path: Path) -> None:
    safe_extract(b"", tmp_path / "ctx")
    assert list((tmp_path / "ctx").iterdir()) == []


@pytest.mark.parametrize(
    "member",
    [
        ("../evil.txt", b"x", None),
        ("sub/../../evil.txt", b"x", None),
        ("/tmp/evil.txt", b"x", None),
        ("link", None, "../../etc/passwd"),
        ("link", None, "/etc/passwd"),
        ("sub/link", None, "../../outside"),
    ],
)
def test_refuses_escaping_members(tmp_path: Path, member: tuple[str, bytes | None, str | None]) -> None:
    dest = tmp_path / "deep" / "ctx"
    with pytest.raises(UnsafeArchiveError):
        safe_extract(make_tgz([("ok.txt", b"fine", None), member]), dest)
    assert not (tmp_path / "deep" / "evil.txt").exists()
    assert not (dest / "ok.txt").exists()  # nothing written when any member is bad
