"""The shared monitor (launchers.monitor): one worker fails -> the rest are stopped and the exit is
non-zero; a worker that ignores SIGTERM is killed after the grace; all exit 0 -> 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launchers import monitor
from tests.launchers.conftest import gone

SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
STUBBORN = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def wait_file(path: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def test_all_succeed():
    workers = [monitor.Worker(py(f"print({i})"), name=f"w{i}") for i in range(3)]
    assert monitor.run(workers, grace_s=1) == 0


def test_one_fails_and_the_others_are_stopped(tmp_path):
    workers = [monitor.Worker(py(SLEEPER, str(tmp_path / "a")), name="a"),
               monitor.Worker(py("import time, sys; time.sleep(0.5); sys.exit(7)"), name="b"),
               monitor.Worker(py(SLEEPER, str(tmp_path / "c")), name="c")]
    t0 = time.monotonic()
    assert monitor.run(workers, grace_s=5) == 7
    assert time.monotonic() - t0 < 5, "SIGTERM should have ended the sleepers at once"
    assert gone(int((tmp_path / "a").read_text())) and gone(int((tmp_path / "c").read_text()))


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    workers = [monitor.Worker(py(STUBBORN, str(tmp_path / "s")), name="stubborn"),
               monitor.Worker(py("import time, sys; time.sleep(1); sys.exit(2)"), name="fails")]
    t0 = time.monotonic()
    assert monitor.run(workers, grace_s=1.5) == 2
    took = time.monotonic() - t0
    assert 2.4 <= took < 15, took
    assert gone(int((tmp_path / "s").read_text()))


def test_killed_by_a_signal_is_128_plus_and_a_missing_program_fails():
    assert monitor.run([monitor.Worker(["sh", "-c", "kill -KILL $$"])], grace_s=1) == 137
    assert monitor.run([monitor.Worker(["/nonexistent/prog"]), monitor.Worker(py("print(1)"))], grace_s=1) == 127


def test_status_files_of_wrapped_workers_fail_the_group(tmp_path):
    """Workers started by another tool report through launchers.wrap_rank's status files."""
    status = tmp_path / "status"
    status.mkdir()
    env = {**os.environ, "DET_LAUNCHER_STATUS_DIR": str(status)}
    # A stand-in for torch.distributed.run: it starts two wrapped workers and waits for ever.
    tool = ("import os, subprocess, sys, time\n"
            "codes = ('import time; time.sleep(600)', 'import time, sys; time.sleep(0.5); sys.exit(5)')\n"
            "for r, code in enumerate(codes):\n"
            "    subprocess.Popen([sys.executable, '-m', 'launchers.wrap_rank', 'R', '--',\n"
            "                      sys.executable, '-c', code],\n"
            "                     env={**os.environ, 'R': str(r)}, start_new_session=True)\n"
            "time.sleep(600)\n")
    t0 = time.monotonic()
    code = monitor.run([monitor.Worker(py(tool), env=env, name="tool")], grace_s=2, status_dir=str(status))
    assert code == 5 and time.monotonic() - t0 < 30
    pid0 = int((status / "rank-0.pid").read_text().split()[0])
    assert gone(pid0)


def test_the_rank_that_failed_first_is_named_not_the_ones_its_tool_then_stopped(tmp_path, capsys):
    """torch.distributed.run SIGTERMs a failed rank's neighbours itself: when the launcher reads both
    exit files in one scan, the cause is the earlier exit (rank 3), not the first name (rank 2)."""
    status = tmp_path / "status"
    status.mkdir()
    (status / "rank-2.exit").write_text("143 1700000000.500000\n")  # stopped by the tool, later
    (status / "rank-3.exit").write_text("3 1700000000.100000\n")
    code = monitor.run([monitor.Worker(py("import time; time.sleep(600)"), name="tool")], grace_s=1,
                       status_dir=str(status))
    assert code == 3
    assert "rank 3 exited 3: stopping the other workers" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_launcher_stops_every_worker(tmp_path, sig):
    code = (
        "import sys\n"
        "from launchers import monitor\n"
        f"sys.exit(monitor.run([monitor.Worker([sys.executable, '-c', {SLEEPER!r}, '{tmp_path}/x']),\n"
        f"                      monitor.Worker([sys.executable, '-c', {STUBBORN!r}, '{tmp_path}/y'])], grace_s=1))\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    x, y = wait_file(tmp_path / "x"), wait_file(tmp_path / "y")
    threading.Timer(0.2, proc.send_signal, (sig,)).start()
    assert proc.wait(30) == 128 + sig
    assert gone(x) and gone(y)


def test_a_launcher_stopped_by_a_signal_exits_with_it_even_when_its_workers_needed_the_sigkill(tmp_path):
    """What a loaded machine did to the test above: the workers outlived the grace and died of the
    SIGKILL (137). The launcher was still stopped by SIGINT, and says so (130)."""
    deaf = ("import os, signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")
    code = (
        "import sys\n"
        "from launchers import monitor\n"
        f"sys.exit(monitor.run([monitor.Worker([sys.executable, '-c', {deaf!r}, '{tmp_path}/x'])], grace_s=1))\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    x = wait_file(tmp_path / "x")
    threading.Timer(0.2, proc.send_signal, (signal.SIGINT,)).start()
    assert proc.wait(30) == 128 + signal.SIGINT
    assert gone(x)
