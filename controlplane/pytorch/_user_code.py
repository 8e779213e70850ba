"""The model's code in each checkpoint (``code/``), as Determined's Trial API writes it
(``determined.util.write_user_code``): a checkpoint can be loaded later with the code that wrote it.

On the cluster (where the working directory is the experiment's context) Determined copies a clean
copy of the model definition; here the clean copy is the list of the context's files taken when the
trial starts (``remember``, from ``pytorch.init``), before training writes data, logs or checkpoints
into the working directory, under the context's ``.detignore``. Off the cluster the working
directory is anyone's (a repository, a home directory), so nothing is copied. Bounded like a context
(Determined's 95 MiB), so a huge working directory never makes a checkpoint huge: past the bound
the rest is left out, and the log says so.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from controlplane.common.context_names import MAX_CONTEXT_BYTES
from controlplane.common.detignore import DETIGNORE, ignore_spec

log = logging.getLogger("controlplane.pytorch")
MAX_FILES = 10_000

_remembered: tuple[Path, list[str]] | None = None


def remember(on_cluster: bool) -> None:
    """The context's files (relative paths) in the working directory now, once per directory."""
    global _remembered
    root = Path.cwd().resolve()
    if _remembered is not None and _remembered[0] == root:
        return
    if not on_cluster:
        _remembered = (root, [])
        return
    try:
        spec = ignore_spec(root)
    except (OSError, UnicodeDecodeError) as e:
        log.warning("no code/ in checkpoints: cannot read %s: %s", root / DETIGNORE, e)
        _remembered = (root, [])
        return
    files: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        prefix = here.relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        dirnames[:] = sorted(d for d in dirnames
                             if not (here / d).is_symlink() and not spec.match_file(f"{prefix}{d}/"))
        for name in sorted(filenames):
            rel, path = prefix + name, here / name
            if rel == DETIGNORE or spec.match_file(rel) or path.is_symlink() or not path.is_file():
                continue
            total += path.stat().st_size
            if total > MAX_CONTEXT_BYTES or len(files) >= MAX_FILES:
                log.warning("code/ in checkpoints holds the first %d files of %s: the rest is over the "
                            "bound of a context (%d bytes, %d files)", len(files), root, MAX_CONTEXT_BYTES,
                            MAX_FILES)
                _remembered = (root, files)
                return
            files.append(rel)
    _remembered = (root, files)


def write_user_code(checkpoint_dir: Path) -> None:
    """Copies the remembered files that still exist into ``checkpoint_dir/code`` (none remembered:
    no ``code/``)."""
    if _remembered is None or not _remembered[1]:
        return
    root, files = _remembered
    code = checkpoint_dir / "code"
    if code.exists():
        shutil.rmtree(code)
    code.mkdir(mode=0o755)
    for rel in files:
        src = root / rel
        if src.is_file():
            dst = code / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
