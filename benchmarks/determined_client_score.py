"""How much of Determined 0.38.1's unmodified client works against this master (issue 27).

Starts a cluster of its own (`det deploy local up`: 2 agents of 2 slots, the master on a PostgreSQL
database made for the run and dropped after it, every agent offering the real ``determined==0.38.1``
venv as the task environment ``determined-0.38.1``), then runs three groups of checks with that
venv's own ``det`` and Python, and scores them:

- ``cli`` (94): ``det`` invocations over every command group a Determined user uses on a cluster:
  experiment, trial, checkpoint, model, user, token, job, agent, slot, resource-pool, master, cmd,
  shell, notebook, tensorboard, task, template, workspace, project, version. Each checks what the
  command printed (and, where the command only acknowledges, what the master then answers), with a
  timeout per command; commands that would follow logs or open a browser run with ``--detach`` /
  ``--no-browser`` or end by themselves.
- ``sdk`` (63): calls of ``determined.experimental.client`` in the client's own interpreter (one
  script; each call in try/except, one JSON line per call): users, workspaces and projects,
  experiments (create, wait, list filters, lifecycle, labels, move, delete), trials (metrics
  iterators and streams, summary metrics, logs, checkpoints, kill), checkpoints (download, metadata,
  delete) and models.
- ``harness`` (16): Determined's own harness inside tasks, as its users run it: the Core API
  tutorials 0-4 (metrics, checkpoints and their download, pause/resume, warm start, cancel, a custom
  shared_fs storage_path, adaptive ASHA stopping trials early, 4 workers over two agents), and the
  ``mnist_pytorch`` tutorial's ``PyTorchTrial`` under ``pytorch.Trainer`` on 1 and 2 slots, with only
  its data loader made synthetic (no download).

The workloads are Determined's own files: the Core API tutorials 1-4 from
``tests/e2e/determined_tutorials`` and, embedded in ``determined_client/workloads.py`` (byte for byte
from determined-ai/determined at tag v0.38.1, commit 6bcda5dd; Apache License 2.0, see
tests/e2e/determined_tutorials/LICENSE), tutorial 0 and ``examples/tutorials/mnist_pytorch``'s
``train.py``, ``model.py``, ``const.yaml`` and ``distributed.yaml``; only ``data.py`` is ours
(synthetic tensors of MNIST's shape). The harness scenarios are submitted together, in the order a
user might (the 4-slot tutorial 4 ahead of the mnist trials), so the pool's scheduler decides what
runs when; ``--no-preemption`` gives the default pool Determined's own default
(``scheduler: {type: priority, preemption: false}``). The commands that act on running work use a
trial of ours that runs until told to stop (Core API ``should_preempt``).

Prints a table of every check (group, name, PASS/FAIL, one line of why), then each failure's last
command and its output, and ends with one key=value line.

    .venv/bin/python benchmarks/determined_client_score.py                 # all three groups
    .venv/bin/python benchmarks/determined_client_score.py --only cli      # or sdk, harness
    .venv/bin/python benchmarks/determined_client_score.py --extra         # + unscored 0.38.1 probes
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.determined_client.cli_checks import run_cli, run_cli_extra
from benchmarks.determined_client.cluster import Master, RealDet, local_cluster, pg_database
from benchmarks.determined_client.harness_checks import run_harness
from benchmarks.determined_client.scoreboard import Scoreboard, print_report
from benchmarks.determined_client.sdk_checks import run_sdk
from benchmarks.determined_client.settings import DEFAULT_VENV, ENVIRONMENT, EXPECTED


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["cli", "sdk", "harness"], action="append",
                    help="run only this group (repeatable; default: all three)")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                    help="the determined==0.38.1 venv (its bin/det and bin/python; offered to tasks as "
                         f"{ENVIRONMENT})")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--slots-per-agent", type=int, default=2)
    ap.add_argument("--extra", action="store_true",
                    help="with cli: also probe 0.38.1 commands left out of the 94 (printed, not scored)")
    ap.add_argument("--no-preemption", action="store_true",
                    help="give the default pool `scheduler: {type: priority, preemption: false}` (Determined's "
                         "default) instead of the master's own default")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, downloads, logs)")
    ap.add_argument("--quiet", action="store_true", help="no line per check as it runs, only the table")
    args = ap.parse_args()
    groups = args.only or ["cli", "sdk", "harness"]
    venv = args.venv.resolve()
    if not (venv / "bin" / "det").exists():
        sys.exit(f"no determined venv at {venv} (tests/support/determined_venv.py builds it)")

    board = Scoreboard(verbose=not args.quiet)
    work = Path(tempfile.mkdtemp(prefix="det-client-score-"))
    started = time.monotonic()
    try:
        with pg_database() as db_url, local_cluster(work, db_url, venv, args.agents, args.slots_per_agent,
                                                    False if args.no_preemption else None) as url:
            print(f"cluster: {url} ({args.agents} agents x {args.slots_per_agent} slots, PostgreSQL "
                  f"{db_url.rsplit('/', 1)[1]}); work dir {work}", flush=True)
            master = Master(url)
            for group in groups:
                t0 = time.monotonic()
                print(f"\n== {group} ==", flush=True)
                if group == "cli":
                    cli = RealDet(board, venv, url, work / "cli-home")
                    found = run_cli(board, cli, master, work)
                    if args.extra:
                        run_cli_extra(board, cli, found, work)
                elif group == "sdk":
                    run_sdk(board, venv, url, work)
                else:
                    run_harness(board, RealDet(board, venv, url, work / "harness-home"), master, work)
                print(f"== {group}: {time.monotonic() - t0:.0f} s", flush=True)
            if args.keep:
                shutil.copytree(work / "cluster" / "logs", work / "cluster-logs", dirs_exist_ok=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_report(board, groups)
    print(f"wall time {time.monotonic() - started:.0f} s")
    figures = []
    for g in ["cli", "sdk", "harness"]:
        if g in groups:
            passed = sum(1 for r in board.results if r.group == g and r.ok)
            figures.append(f"{g}_passed={passed}/{EXPECTED[g]}")
    extra = [r for r in board.results if r.group == "cli-extra"]
    if extra:
        figures.append(f"cli_extra_passed={sum(r.ok for r in extra)}/{len(extra)}")
    print(" ".join(figures))


if __name__ == "__main__":
    main()
