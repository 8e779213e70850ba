import base64

import pytest

from controlplane.cli import context
from controlplane.cli.errors import CliError


def make_tree(root):
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "pkg" / "stale.pyc").write_bytes(b"\0")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\1" * 10)
    (root / "data" / "keep.txt").write_text("keep")
    (root / "train.py").write_text("print('hi')\n")
    (root / "notes.log").write_text("log")
    (root / ".detignore").write_text("# comment\n*.log\ndata/*.bin\n")


def test_detignore_and_defaults(tmp_path):
    make_tree(tmp_path)
    files = context.collect(tmp_path)
    paths = [f["path"] for f in files]
    assert paths == ["data", "pkg", "train.py", "data/keep.txt", "pkg/mod.py"]
    by_path = {f["path"]: f for f in files}
    assert by_path["data"]["type"] == 53 and by_path["data"]["content"] == ""
    assert by_path["train.py"]["type"] == 48
    assert base64.b64decode(by_path["train.py"]["content"]) == b"print('hi')\n"
    for f in files:
        assert set(f) == {"path", "type", "content", "mode", "mtime", "uid", "gid"}
        assert isinstance(f["mtime"], str) and f["mtime"].isdigit()
        assert f["uid"] == 0 and f["gid"] == 0 and isinstance(f["mode"], int)


def test_negation_and_directory_patterns(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.txt").write_text("a")
    (tmp_path / "x.ckpt").write_text("c")
    (tmp_path / "y.ckpt").write_text("c")
    (tmp_path / ".detignore").write_text("out/\n*.ckpt\n!y.ckpt\n")
    assert [f["path"] for f in context.collect(tmp_path)] == ["y.ckpt"]


def test_missing_context_dir(tmp_path):
    with pytest.raises(CliError, match="does not exist"):
        context.collect(tmp_path / "nope")


def test_oversized_context_refused_naming_five_largest(tmp_path):
    mib = 1024 * 1024
    sizes = {"a.bin": 30, "b.bin": 25, "c.bin": 20, "d.bin": 15, "e.bin": 10, "f.bin": 1, "g.bin": 0}
    for name, size in sizes.items():
        with open(tmp_path / name, "wb") as f:
            f.truncate(size * mib)  # sparse: no disk use, nothing read
    with pytest.raises(CliError) as info:
        context.collect(tmp_path)
    msg = info.value.message
    assert "101.0 MiB" in msg and "95.0 MiB" in msg
    for name in ["a.bin", "b.bin", "c.bin", "d.bin", "e.bin"]:
        assert name in msg
    assert "f.bin" not in msg and "g.bin" not in msg
    assert msg.index("a.bin") < msg.index("e.bin")
    assert "30.0 MiB" in msg and ".detignore" in msg


def test_ignored_big_files_do_not_count(tmp_path):
    with open(tmp_path / "huge.bin", "wb") as f:
        f.truncate(200 * 1024 * 1024)
    (tmp_path / "train.py").write_text("")
    (tmp_path / ".detignore").write_text("*.bin\n")
    assert [f["path"] for f in context.collect(tmp_path)] == ["train.py"]
