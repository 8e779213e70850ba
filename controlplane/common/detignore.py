"""Which files of a context directory are the model's: Determined's ``.detignore`` rules (gitignore
syntax) over its default ignores. The CLI packs a context with them; the Trial API copies the
model's code into each checkpoint (``code/``) with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pathspec

DEFAULT_IGNORES = [
    "__pycache__/", "*.py[co]", "*$py.class", "terraform", "terraform_data", "terraform.tfstate*",
    "terraform.tfvars*", ".terraform*", ".git/", ".vscode/", ".idea/", ".mypy_cache/", "/shared_fs",
]
DETIGNORE = ".detignore"


def ignore_spec(root: Path) -> pathspec.PathSpec[Any]:
    """The rules of ``root``; a ``.detignore`` that cannot be read raises OSError or UnicodeDecodeError."""
    lines = list(DEFAULT_IGNORES)
    ignore_file = root / DETIGNORE
    if ignore_file.is_file():
        lines += ignore_file.read_text().splitlines()
    # GitIgnoreSpec is gitwildmatch with git's own precedence rules (pathspec >= 0.10; the bare
    # GitWildMatchPattern factory is deprecated in pathspec 1.x).
    return pathspec.GitIgnoreSpec.from_lines(lines)
