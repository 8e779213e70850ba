"""wrap_rank prefixes every line with the rank and keeps the child's exit code."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launchers.wrap_rank", *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, **env},
    )


def test_prefixes_and_exit_code() -> None:
    code = "import sys; print('INFO: a'); print('b', file=sys.stderr); sys.stdout.write('no-newline'); sys.exit(5)"
    res = run(["RANK", "--", sys.executable, "-c", code], {"RANK": "2"})
    assert res.returncode == 5
    assert res.stdout.splitlines() == ["[rank=2] INFO: a", "[rank=2] no-newline"]
    assert res.stderr.splitlines() == ["[rank=2] b"]


def test_without_separator_and_second_var() -> None:
    res = run(["NOPE,LOCAL", sys.executable, "-c", "print('x')"], {"LOCAL": "1"})
    assert res.returncode == 0 and res.stdout == "[rank=1] x\n"


def test_signal_exit_is_128_plus() -> None:
    res = run(["RANK", "--", "sh", "-c", "kill -TERM $$"], {"RANK": "0"})
    assert res.returncode == 143


def test_a_number_is_the_rank_itself() -> None:
    res = run(["3", sys.executable, "-c", "print('x')"], {})
    assert res.returncode == 0 and res.stdout == "[rank=3] x\n"


def test_status_files_for_the_launcher(tmp_path) -> None:
    code = "import os, sys; print(os.environ.get('DET_LAUNCHER_STATUS_DIR')); sys.exit(6)"
    res = run(["RANK", "--", sys.executable, "-c", code], {"RANK": "2", "DET_LAUNCHER_STATUS_DIR": str(tmp_path)})
    assert res.returncode == 6 and res.stdout == "[rank=2] None\n"  # not passed on to the worker
    pid, pgid = (tmp_path / "rank-2.pid").read_text().split()
    assert int(pid) > 0 and int(pgid) > 0
    code, at = (tmp_path / "rank-2.exit").read_text().split()
    assert code == "6" and abs(float(at) - time.time()) < 300  # when it exited, for the launcher's order
