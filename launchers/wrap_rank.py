"""Prefix every output line of a command with ``[rank=N] `` (mirror of determined.launch.wrap_rank).

Usage: ``python -m launchers.wrap_rank [--no-redirect-stdio] RANKVAR[,RANKVAR2] [--] cmd...``.
N is the value of the first of the named environment variables that is set. The agent's log
shipper parses the prefix back into ``LogLine.rank``. Signals INT/TERM/HUP/USR1/USR2 are
forwarded to the child; the exit code is the child's (128+N when killed by signal N).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from typing import IO

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def read_rank(rank_vars: str, env: dict[str, str] | None = None) -> str:
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
    prefix = f"[rank={read_rank(args.rank_var)}] ".encode()
    proc = subprocess.Popen(args.script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

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
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
