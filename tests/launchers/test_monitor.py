"""The shared monitor (launchers.monitor): one worker fails -> the rest are stopped and the exit is
non-zero; a worker that ignores SIGTERM is killed after the grace; all exit 0 -> 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchers import monitor
from tests.launchers.conftest import gone

# A worker that says it is running by writing its pid (whole, through a rename) to argv[1], then sleeps.
SLEEPER = ("import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
           "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)")
# The same, ignoring SIGTERM from before it says it is running.
STUBBORN = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + SLEEPER


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def fails_once_running(code: int, *pid_files: Path, then_s: float = 0.0) -> list[str]:
    """A worker that exits ``code`` once the others have written their pid files (``then_s`` later):
    the failure then meets running workers however slowly a loaded machine starts them. After 60 s
    without them it exits 99, which no test expects."""
    return py("import os, sys, time\n"
              "deadline = time.monotonic() + 60\n"
              "while not all(os.path.exists(f) for f in sys.argv[3:]):\n"
              "    if time.monotonic() > deadline:\n"
              "        sys.exit(99)\n"
              "    time.sleep(0.02)\n"
              "time.sleep(float(sys.argv[2]))\n"
              "sys.exit(int(sys.argv[1]))\n", str(code), str(then_s), *map(str, pid_files))


def wait_file(path: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def wait_watching(pid: int, timeout: float = 30) -> None:
    """Until the launcher ``pid`` has its handlers for the signals it stops or passes on (/proc's
    SigCgt): it is watching its workers, so a signal sent now is one it acts on, not one that ends
    it first. All of them: Python itself catches SIGINT from the start."""
    wanted = sum(1 << (sig - 1) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                                            signal.SIGUSR2))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & wanted == wanted:
            return
        time.sleep(0.02)
    raise AssertionError(f"the launcher (pid {pid}) did not set up its signal handlers within {timeout}s")


def test_all_succeed():
    workers = [monitor.Worker(py(f"print({i})"), name=f"w{i}") for i in range(3)]
    assert monitor.run(workers, grace_s=1) == 0


def test_one_fails_and_the_others_are_stopped(tmp_path):
    a, c = tmp_path / "a", tmp_path / "c"
    workers = [monitor.Worker(py(SLEEPER, str(a)), name="a"),
               monitor.Worker(fails_once_running(7, a, c), name="b"),
               monitor.Worker(py(SLEEPER, str(c)), name="c")]
    t0 = time.monotonic()
    assert monitor.run(workers, grace_s=30) == 7
    assert time.monotonic() - t0 < 30, "SIGTERM should have ended the sleepers at once, not the SIGKILL after the grace"
    assert [w.proc.returncode for w in workers if w.proc] == [-signal.SIGTERM, 7, -signal.SIGTERM]
    assert gone(int(a.read_text())) and gone(int(c.read_text()))


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    s = tmp_path / "s"
    workers = [monitor.Worker(py(STUBBORN, str(s)), name="stubborn"),
               monitor.Worker(fails_once_running(2, s, then_s=1), name="fails")]
    t0 = time.monotonic()
    assert monitor.run(workers, grace_s=1.5) == 2
    took = time.monotonic() - t0
    assert 2.4 <= took < 15, took
    assert workers[0].proc is not None and workers[0].proc.returncode == -signal.SIGKILL
    assert gone(int(s.read_text()))


def test_killed_by_a_signal_is_128_plus_and_a_missing_program_fails():
    assert monitor.run([monitor.Worker(["sh", "-c", "kill -KILL $$"])], grace_s=1) == 137
    assert monitor.run([monitor.Worker(["/nonexistent/prog"]), monitor.Worker(py("print(1)"))], grace_s=1) == 127


def test_status_files_of_wrapped_workers_fail_the_group(tmp_path):
    """Workers started by another tool report through launchers.wrap_rank's status files."""
    status = tmp_path / "status"
    status.mkdir()
    env = {**os.environ, "DET_LAUNCHER_STATUS_DIR": str(status)}
    # A stand-in for torch.distributed.run: it starts two wrapped workers and waits for ever. Rank 1
    # fails once rank 0 is running (wrap_rank has left its pid).
    ranks = [py("import time; time.sleep(600)"), fails_once_running(5, status / "rank-0.pid")]
    tool = ("import os, subprocess, sys, time\n"
            f"for r, argv in enumerate({ranks!r}):\n"
            "    subprocess.Popen([sys.executable, '-m', 'launchers.wrap_rank', 'R', '--', *argv],\n"
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
    wait_watching(proc.pid)
    proc.send_signal(sig)
    assert proc.wait(30) == 128 + sig
    assert gone(x) and gone(y)


def test_a_launcher_stopped_by_a_signal_exits_with_it_even_when_its_workers_needed_the_sigkill(tmp_path):
    """What a loaded machine did to the test above: the workers outlived the grace and died of the
    SIGKILL (137). The launcher was still stopped by SIGINT, and says so (130)."""
    deaf = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + SLEEPER
    code = (
        "import sys\n"
        "from launchers import monitor\n"
        f"sys.exit(monitor.run([monitor.Worker([sys.executable, '-c', {deaf!r}, '{tmp_path}/x'])], grace_s=1))\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    x = wait_file(tmp_path / "x")
    wait_watching(proc.pid)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 128 + signal.SIGINT
    assert gone(x)
