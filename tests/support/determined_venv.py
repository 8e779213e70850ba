"""The unmodified ``determined==0.38.1`` client in its own virtualenv, built once and cached.

One venv serves both sides of compatibility: its ``det`` is the real CLI and its Python is the
real SDK, and an agent offers it to tasks as the ``determined-0.38.1`` environment (with torch,
which Determined's default images carry, and tensorboard, which the harness's metric writer
imports). It lives under ``.cache/`` (git-ignored), so only the first run pays for the install;
a lock file keeps concurrent test processes from building it twice. That install starts from the
project venv's own torch, the same pinned CPU build, hard-linked in (``_seed_torch``) rather than
unpacked and byte-compiled again from its wheel.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DETERMINED_VERSION = "0.38.1"
ENVIRONMENT_NAME = f"determined-{DETERMINED_VERSION}"
VENV = ROOT / ".cache" / f"determined-{DETERMINED_VERSION}-venv"
# torch as the project pins it (a CPU build from local disk); tensorboard for the harness's writer.
TORCH_VERSION = "2.13.0"
PACKAGES = (f"determined=={DETERMINED_VERSION}", f"torch=={TORCH_VERSION}", "tensorboard")
_READY = VENV / ".ready"


def _seed_torch(venv: Path) -> None:
    """Hard-links this interpreter's torch into ``venv`` when it is the pinned build: the files pip
    installed from the same wheel (its RECORD, byte-compiled modules included), so the install that
    follows finds torch==TORCH_VERSION there and adds only what it lacks (its requirements are still
    resolved and installed by pip). The distribution's own metadata is linked last: torch half-linked
    (another filesystem, say) has none, and pip installs it from the wheel as it would without this."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return
    if dist.version.split("+")[0] != TORCH_VERSION or not dist.files:
        return
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    files = sorted(dist.files, key=lambda f: ".dist-info/" in f.as_posix())  # metadata last
    try:
        for f in files:
            src = Path(str(dist.locate_file(f)))
            if not src.is_file():
                continue
            if f.as_posix().startswith("../"):  # a console script in bin/: for this venv's interpreter
                dst = venv / "bin" / src.name
                body = src.read_text().split("\n", 1)[1]
                dst.write_text(f"#!{venv / 'bin' / 'python'}\n{body}")
                dst.chmod(0o755)
                continue
            dst = site / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
    except OSError:
        return


def ensure_determined_venv() -> Path:
    """The venv's directory, built on first use (a few minutes) and reused afterwards."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f".{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _READY.exists() and _READY.read_text() == "\n".join(PACKAGES):
            return VENV
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        _seed_torch(VENV)
        subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", *PACKAGES],
                       check=True, timeout=1500)
        _READY.write_text("\n".join(PACKAGES))
    return VENV
