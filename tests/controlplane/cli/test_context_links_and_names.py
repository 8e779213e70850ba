"""The CLI checks the context before reading or sending it: links and names, under the shared rules."""

from __future__ import annotations

import base64
import os

import pytest

from controlplane.cli import context
from controlplane.cli.errors import CliError


def test_symlink_out_of_the_context_is_refused_naming_it(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not upload")
    root = tmp_path / "ctx"
    root.mkdir()
    (root / "train.py").write_text("")
    os.symlink(secret, root / "leak.txt")
    with pytest.raises(CliError) as e:
        context.collect(root)
    assert "leak.txt" in e.value.message and "outside the context" in e.value.message


def test_symlinked_directory_out_of_the_context_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    root = tmp_path / "ctx"
    root.mkdir()
    os.symlink("../elsewhere", root / "data")
    with pytest.raises(CliError, match="data points outside"):
        context.collect(root)


def test_symlink_inside_is_sent_as_a_link_not_its_target(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("x = 1\n")
    os.symlink(tmp_path / "lib" / "util.py", tmp_path / "util.py")  # absolute, but inside
    os.symlink("lib", tmp_path / "pkg")
    files = {f["path"]: f for f in context.collect(tmp_path)}
    assert files["util.py"]["type"] == 50
    assert base64.b64decode(files["util.py"]["content"]) == b"lib/util.py"
    assert files["pkg"]["type"] == 50 and base64.b64decode(files["pkg"]["content"]) == b"lib"
    assert "pkg/util.py" not in files  # a linked directory is not walked twice


def test_ignored_symlinks_are_not_checked(tmp_path):
    os.symlink("/etc/passwd", tmp_path / "outside.log")
    (tmp_path / ".detignore").write_text("*.log\n")
    (tmp_path / "train.py").write_text("")
    assert [f["path"] for f in context.collect(tmp_path)] == ["train.py"]


@pytest.mark.parametrize("name", ["C:evil", "back\\slash.py"])
def test_names_the_agent_cannot_create_are_refused_before_upload(tmp_path, name):
    (tmp_path / name).write_text("")
    with pytest.raises(CliError) as e:
        context.collect(tmp_path)
    assert name in e.value.message and ".detignore" in e.value.message


def test_entries_count_toward_the_limit(tmp_path):
    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    with pytest.raises(CliError, match="over the"):
        context.check_size(context.scan(tmp_path), limit=30 * 512 - 1)
    assert context.check_size(context.scan(tmp_path), limit=30 * 512) == 30 * 512
