"""Where the score finds things and what it expects: the repository, the client's venv and the
tutorials, the task environment's name, the PostgreSQL server, each group's count of checks, and the
passwords the checks set."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_VENV = ROOT / ".cache" / "determined-0.38.1-venv"
TUTORIALS = ROOT / "tests" / "e2e" / "determined_tutorials"
ENVIRONMENT = "determined-0.38.1"
PG_ADMIN_URL = os.environ.get("DET_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
EXPECTED = {"cli": 94, "sdk": 63, "harness": 16}
PASSWORD = "Passw0rdX"  # meets the client's complexity check
NEW_PASSWORD = "Newpassw0rdY"
