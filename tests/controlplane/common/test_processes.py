"""pid_exists: a live process (ours or another user's) exists, a reaped one does not."""

from __future__ import annotations

import subprocess

from controlplane.common.processes import pid_exists


def test_a_running_process_exists_and_a_reaped_one_does_not() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_exists(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not pid_exists(proc.pid)
    assert pid_exists(1)  # init: another user's process where the tests do not run as root
