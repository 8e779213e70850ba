"""Prefix every output line of a command with ``[rank=N] `` (mirror of determined.launch.wrap_rank).

Usage: ``python -m launchers.wrap_rank [--no-redirect-stdio] RANKVAR[,RANKVAR2] [--] cmd...``.
N is the value of the first of the named environment variables that is set (or RANKVAR itself
when it is a number, as in a custom launcher's ``wrap_rank $RANK cmd...``). The agent's log
shipper parses the prefix back into ``LogLine.rank``. Signals INT/TERM/HUP/USR1/USR2 are
forwarded to the child; the exit code is the child's (128+N when killed by signal N).

Under a launcher of this package (``DET_LAUNCHER_STATUS_DIR`` set, and not passed on to the
child) it also leaves ``rank-N.pid`` (its pid and process group) and ``rank-N.exit`` (the exit code
and the wall-clock time of the exit) there, so the launcher sees a worker fail at once even when
another tool (torch.distributed.run, DeepSpeed) started it, and can stop every worker itself
(``launchers.monitor``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STATUS_DIR_ENV = "DET_LAUNCHER_STATUS_DIR"


def _write_status(status_dir: str | None, rank: str, suffix: str, text: str) -> None:
    if not status_dir:
        return
    name = os.path.join(status_dir, f"rank-{re.sub(r'[^0-9A-Za-z_.-]', '_', rank)}.{suffix}")
    try:
        with open(name + ".tmp", "w") as f:
            f.write(text)
        os.replace(name + ".tmp", name)  # the launcher never reads half a file
    except OSError:
        pass


def read_rank(rank_vars: str, env: dict[str, str] | None = None) -> str:
    """The value of the first named variable that is set; a number is the rank itself (a custom
    launcher's ``wrap_rank $RANK CMD``)."""
    if rank_vars.strip().isdigit():
        return rank_vars.strip()
    env = dict(os.environ) if env is None else env
    for name in rank_vars.split(","):
        value = env.get(name.strip())
        if value is not None and value != "":
            return value
    raise SystemExit(f"wrap_rank: none of the rank variables {rank_vars!r} is set")


def _copy(src: IO[bytes], dst: IO[bytes], prefix: bytes) -> None:
    for line in iter(src.readline, b""):
        dst.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
        dst.flush()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="wrap_rank")
    p.add_argument("--no-redirect-stdio", action="store_true", help="accepted for compatibility")
    p.add_argument("rank_var")
    p.add_argument("script", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.script and args.script[0] == "--":
        args.script = args.script[1:]
    if not args.script:
        p.error("no command given")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank = read_rank(args.rank_var)
    prefix = f"[rank={rank}] ".encode()
    child_env = dict(os.environ)
    status_dir = child_env.pop(STATUS_DIR_ENV, None)
    _write_status(status_dir, rank, "pid", f"{os.getpid()} {os.getpgrp()}\n")
    try:
        proc = subprocess.Popen(args.script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env)
    except OSError as e:
        print(f"{prefix.decode()}wrap_rank: cannot run {args.script[0]}: {e}", file=sys.stderr, flush=True)
        _write_status(status_dir, rank, "exit", "127\n")
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_copy, args=(proc.stdout, sys.stdout.buffer, prefix), daemon=True),
        threading.Thread(target=_copy, args=(proc.stderr, sys.stderr.buffer, prefix), daemon=True),
    ]
    for t in threads:
        t.start()
    rc = proc.wait()
    for t in threads:
        t.join()
    code = 128 - rc if rc < 0 else rc
    # The time lets the launcher tell the worker that failed first from the ones its tool then
    # stopped, whichever file it reads first.
    _write_status(status_dir, rank, "exit", f"{code} {time.time():.6f}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
