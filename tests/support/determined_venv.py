"""The unmodified ``determined==0.38.1`` client in its own virtualenv, built once and cached.

One venv serves both sides of compatibility: its ``det`` is the real CLI and its Python is the
real SDK, and an agent offers it to tasks as the ``determined-0.38.1`` environment (with torch,
which Determined's default images carry, and tensorboard, which the harness's metric writer
imports). It lives under ``.cache/`` (git-ignored), so only the first run pays for the install;
a lock file keeps concurrent test processes from building it twice.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DETERMINED_VERSION = "0.38.1"
ENVIRONMENT_NAME = f"determined-{DETERMINED_VERSION}"
VENV = ROOT / ".cache" / f"determined-{DETERMINED_VERSION}-venv"
# torch as the project pins it (a CPU build from local disk); tensorboard for the harness's writer.
PACKAGES = (f"determined=={DETERMINED_VERSION}", "torch==2.13.0", "tensorboard")
_READY = VENV / ".ready"


def ensure_determined_venv() -> Path:
    """The venv's directory, built on first use (a few minutes) and reused afterwards."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / f".{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _READY.exists() and _READY.read_text() == "\n".join(PACKAGES):
            return VENV
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", *PACKAGES],
                       check=True, timeout=1500)
        _READY.write_text("\n".join(PACKAGES))
    return VENV
