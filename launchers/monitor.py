"""What every launcher here shares: start workers, watch them, and stop them together.

- Each worker runs in its own process group (``start_new_session``), so stopping it reaches
  whatever it started; it dies with the launcher (``PR_SET_PDEATHSIG``) if the launcher is killed.
- The first worker to exit non-zero fails the group: the others get SIGTERM, and SIGKILL once
  ``grace_s`` has passed (``DET_LAUNCHER_GRACE_S``, default 10 s). The launcher then exits with that
  first failure's code (128+N for a signal N), never 0.
- Every worker exiting 0 makes the launcher exit 0.
- SIGTERM, SIGINT and SIGHUP sent to the launcher are passed to every worker and start the same
  grace; SIGUSR1/SIGUSR2 are only passed on.

``wrap_rank`` gives each worker's lines their ``[rank=N]`` prefix.

A launcher whose workers are started by another tool (torch.distributed.run, DeepSpeed's launch)
passes a status directory (``DET_LAUNCHER_STATUS_DIR``): ``launchers.wrap_rank`` leaves each worker's
pid, process group and exit code there, so the same rules apply to those workers too: the first
failure is seen within one poll, and every worker still running gets SIGTERM, then SIGKILL after
the grace, whatever the tool in between does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GRACE_ENV = "DET_LAUNCHER_GRACE_S"
DEFAULT_GRACE_S = 10.0
_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PASSED_ON = (signal.SIGUSR1, signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1


def grace_seconds(env: dict[str, str] | None = None) -> float:
    raw = (os.environ if env is None else env).get(GRACE_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_GRACE_S
    except ValueError:
        raise SystemExit(f"{GRACE_ENV} must be a number of seconds, got {raw!r}") from None


def exit_code(returncode: int) -> int:
    """A shell's view of a child's status: 128+N when it was killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def wrap_rank(argv: Sequence[str], rank_var: str = "RANK") -> list[str]:
    """``argv`` run under ``launchers.wrap_rank``, so its lines carry ``[rank=N]``."""
    return [sys.executable, "-m", "launchers.wrap_rank", rank_var, "--", *argv]


@dataclass
class Worker:
    argv: list[str]
    env: dict[str, str] | None = None  # the whole environment (None: the launcher's)
    name: str = ""
    proc: subprocess.Popen[Any] | None = field(default=None, repr=False)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Group:
    """Workers started together and stopped together (see the module's docstring)."""

    def __init__(self, workers: Sequence[Worker], grace_s: float | None = None, poll_s: float = 0.05,
                 log_prefix: str = "launcher", status_dir: str | None = None) -> None:
        self.workers = list(workers)
        self.grace_s = grace_seconds() if grace_s is None else grace_s
        self.poll_s = poll_s
        self.log_prefix = log_prefix
        self.status_dir = status_dir
        self.failure: int | None = None
        self.stopped_by = 0  # the stopping signal the launcher got, if any
        self.kill_at: float | None = None
        self._received: list[int] = []
        self._ranks: dict[str, int] = {}  # rank -> process group, from the status directory
        self._exited: dict[str, int] = {}  # rank -> exit code
        self._adopted: dict[str, int] = {}  # name -> process group

    def _say(self, text: str) -> None:
        print(f"{self.log_prefix}: {text}", file=sys.stderr, flush=True)

    def start(self) -> None:
        for w in self.workers:
            try:
                w.proc = subprocess.Popen(w.argv, env=w.env, start_new_session=True, preexec_fn=_die_with_parent)
            except OSError as e:
                self.fail(127, f"could not start {w.name or w.argv[0]}: {e}")
                break

    def _live(self) -> list[Worker]:
        return [w for w in self.workers if w.proc is not None and w.proc.poll() is None]

    def _stop_all(self, sig: int) -> None:
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.grace_s
        for w in self._live():
            assert w.proc is not None
            _signal_group(w.proc, sig)
        self._signal_ranks(sig)

    def _signal_ranks(self, sig: int) -> None:
        groups = [pgid for rank, pgid in self._ranks.items() if rank not in self._exited or sig == signal.SIGKILL]
        for pgid in groups + list(self._adopted.values()):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _scan_status(self) -> None:
        """Workers that launchers.wrap_rank reported: record them, and fail on a non-zero exit.
        Exits found in one scan are taken in the order they happened: the tool in between
        (torch.distributed.run) stops a failed rank's neighbours itself, and their SIGTERM exits
        must not be reported as the cause."""
        if not self.status_dir:
            return
        try:
            names = os.listdir(self.status_dir)
        except OSError:
            return
        exits: list[tuple[float, str, int]] = []
        for name in sorted(names):
            rank, _, suffix = name.removeprefix("rank-").rpartition(".")
            if not name.startswith("rank-") or suffix not in ("pid", "exit") or rank in self._exited:
                continue
            try:
                with open(os.path.join(self.status_dir, name)) as f:
                    fields = f.read().split()
            except OSError:
                continue
            if suffix == "pid" and len(fields) == 2 and rank not in self._ranks:
                self._ranks[rank] = int(fields[1])
                if self.kill_at is not None:  # started while the group is already stopping
                    self._signal_ranks(signal.SIGTERM)
            elif suffix == "exit" and fields:
                at = float(fields[1]) if len(fields) > 1 else float("inf")
                exits.append((at, rank, int(fields[0])))
        for _at, rank, code in sorted(exits):
            self._exited[rank] = code
            if code != 0:
                self.fail(code, f"rank {rank} exited {code}: stopping the other workers")

    def on_signal(self, signum: int, _frame: object = None) -> None:
        self._received.append(signum)

    def cleanup(self) -> None:
        """Nothing a worker left behind outlives the launcher."""
        for w in self.workers:
            if w.proc is not None:
                _signal_group(w.proc, signal.SIGKILL)
        self._scan_status()
        self._signal_ranks(signal.SIGKILL)

    def wait(self) -> int:
        handlers = {sig: signal.signal(sig, self.on_signal) for sig in (*_STOPPING, *_PASSED_ON)}
        try:
            return self._watch()
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
            self.cleanup()

    def adopt(self, name: str, pgid: int) -> None:
        """Stop this process group with the workers (a command run for another container)."""
        self._adopted[name] = pgid
        if self.kill_at is not None:
            self._signal_ranks(signal.SIGTERM)

    def fail(self, code: int, why: str) -> None:
        if self.failure is None:
            self.failure = code or 1
            self._say(why)
            self._stop_all(signal.SIGTERM)

    def tick(self) -> None:
        """One poll of everything but the own workers' exits: signals received, the status
        directory, and the SIGKILL once the grace is over."""
        while self._received:
            sig = self._received.pop(0)
            if sig in _STOPPING:
                self._say(f"got {signal.Signals(sig).name}: stopping the workers")
                self.stopped_by = self.stopped_by or sig
                self._stop_all(sig)
            else:
                for w in self._live():
                    assert w.proc is not None
                    w.proc.send_signal(sig)
        self._scan_status()
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            for w in self._live():
                assert w.proc is not None
                self._say(f"{w.name or w.argv[0]} did not stop within {self.grace_s:g}s: SIGKILL")
                _signal_group(w.proc, signal.SIGKILL)
            self._signal_ranks(signal.SIGKILL)
            self.kill_at = float("inf")

    def _watch(self) -> int:
        reported: set[int] = set()
        while True:
            self.tick()
            live = 0
            for i, w in enumerate(self.workers):
                if w.proc is None:
                    continue
                rc = w.proc.poll()
                if rc is None:
                    live += 1
                elif i not in reported:
                    reported.add(i)
                    if rc != 0 and self.failure is None and self.stopped_by:
                        # Stopped by a signal: exit as a process that signal ended does, whether a
                        # worker died of it or of the SIGKILL after its grace (a loaded machine).
                        self.failure = 128 + self.stopped_by
                    elif rc != 0 and self.failure is None:
                        others = [x.name for x in self._live() if x is not w]
                        self.fail(exit_code(rc), f"{w.name or w.argv[0]} exited {exit_code(rc)}"
                                  + (f": stopping {', '.join(others)}" if others else ""))
            if live == 0:
                return self.failure or 0
            time.sleep(self.poll_s)


def run(workers: Sequence[Worker], grace_s: float | None = None, log_prefix: str = "launcher",
        status_dir: str | None = None) -> int:
    """Start the workers and watch them until all have exited; the launcher's exit code."""
    group = Group(workers, grace_s=grace_s, log_prefix=log_prefix, status_dir=status_dir)
    group.start()
    return group.wait()


def status_dir() -> str:
    """A fresh directory for launchers.wrap_rank's reports (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="det-launcher-")
    atexit.register(shutil.rmtree, path, True)
    return path
