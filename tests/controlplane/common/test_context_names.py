"""The context-name rules the CLI, the master and the agent share."""

from __future__ import annotations

import pytest

from controlplane.common.context_names import (
    MAX_ENTRIES,
    BadContextEntry,
    Entry,
    check_entries,
    name_problem,
    target_problem,
)

BAD_NAMES = {
    "C:evil": "drive name",
    "a\\b": "backslash",
    "/etc/passwd": "absolute path",
    ".": "'.' component",
    "a/./b": "'.' component",
    "..": "'..' component",
    "a/../../b": "'..' component",
    "a//b": "empty path component",
    "a/": "empty path component",
    "": "non-empty string",
    "a\x00b": "NUL",
    "x" * 256: "component over 255 bytes",
    "d/" + "é" * 128: "component over 255 bytes",  # 256 bytes in 128 characters
    "/".join(["d" * 200] * 21): "path limit",
    "bad\udcff": "not valid UTF-8",
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_bad_names_are_named_with_the_rule(name):
    problem = name_problem(name)
    assert problem is not None and BAD_NAMES[name] in problem
    with pytest.raises(BadContextEntry) as e:
        check_entries([Entry("ok.py", "file"), Entry(name, "file")])
    assert e.value.name == name


@pytest.mark.parametrize("name", ["a", "a/b.py", "x" * 255, ".hidden", "a..b", "dir/...", "cc:colon/x:y"])
def test_good_names_pass(name):
    assert name_problem(name) is None


@pytest.mark.parametrize(("entries", "named", "rule"), [
    ([Entry("x", "file"), Entry("x/y", "file")], "x", "needs it to be a directory"),
    ([Entry("x/y/z", "file"), Entry("x-a", "file"), Entry("x", "file")], "x", "needs it to be a directory"),
    ([Entry("l", "symlink", "sub"), Entry("sub", "directory"), Entry("l/f", "file")], "l", "is a link"),
    ([Entry("a", "file"), Entry("a", "file")], "a", "appears twice"),
    ([Entry("d", "directory"), Entry("d", "directory")], "d", "appears twice"),
])
def test_conflicts_between_entries(entries, named, rule):
    with pytest.raises(BadContextEntry) as e:
        check_entries(entries)
    assert e.value.name == named and rule in e.value.problem


def test_a_directory_beside_its_contents_is_fine():
    check_entries([Entry("x", "directory"), Entry("x/y", "file"), Entry("x-y", "file"), Entry("x/z/w", "file")])


@pytest.mark.parametrize(("name", "target", "ok"), [
    ("l", "a.py", True),
    ("sub/l", "../a.py", True),
    ("sub/deeper/l", "../../a.py", True),
    ("l", "../outside", False),
    ("sub/l", "../../outside", False),
    ("l", "/etc/passwd", False),
    ("l", "C:/x", False),
    ("l", "", False),
    ("d/l2", "l1/../..", False),  # climbs back through another link
])
def test_link_targets(name, target, ok):
    links = {"d/l1", name}
    assert (target_problem(name, target, links) is None) is ok


def test_entry_count_is_capped_with_the_count_in_the_message():
    with pytest.raises(BadContextEntry, match=f"200000 entries, over the limit of {MAX_ENTRIES}"):
        check_entries(Entry(f"f{i}", "file") for i in range(200_000))
