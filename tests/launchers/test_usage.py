"""`python3 -m launchers.X -h` prints the launcher's usage and exits 0, as the seed says and as
Determined's launchers do, instead of trying to run a script called `-h`."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("launcher", ["torch_distributed", "deepspeed", "horovod"])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_prints_usage(launcher, flag):
    proc = subprocess.run([sys.executable, "-m", f"launchers.{launcher}", flag], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"python3 -m launchers.{launcher}" in proc.stdout and "--trial module:Class" in proc.stdout
    assert "cannot run" not in proc.stderr
