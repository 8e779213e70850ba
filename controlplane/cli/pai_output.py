"""`det pai output JOB`: what a job's tasks left in ``$PAI_OUTPUT_DIR``, listed or downloaded.

The master keeps each task's outputs under the job in checkpoint storage when the task ends
(``controlplane/pai/outputs.py``). Without ``--to`` this lists them (task, attempt, path, size; pages of
the master's ``GET /api/v1/user/{user}/jobs/{job}/outputs`` until the last); with ``--to DIR`` it
downloads an attempt's outputs (``--attempt``, default the newest that kept any), one archive per task
through the master, into ``DIR/<role>-<index>/<path>``. ``--task ROLE-INDEX`` narrows both to one task.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.cli import render
from controlplane.cli.common import print_json, session_for
from controlplane.cli.errors import CliError
from controlplane.cli.session import Session

PAGE = 1000  # the master's largest list page
DOWNLOAD_TIMEOUT = (10, 600)


def task_arg(text: str) -> str:
    """argparse type for --task: ``<role>-<index>``."""
    from controlplane.pai.outputs import parse_task_name

    if parse_task_name(text) is None:
        raise argparse.ArgumentTypeError(f"expected a task as <role>-<index>, e.g. worker-0, got {text!r}")
    return text


def list_outputs(session: Session, path: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Every kept file the filters name, page by page; and where they are kept."""
    files: list[dict[str, Any]] = []
    location = ""
    while True:
        page = session.get(path, {**params, "offset": len(files), "limit": PAGE})
        if not isinstance(page, dict) or not isinstance(page.get("outputs"), list):
            raise CliError(f"the master answered {path} with no list of outputs")
        location = str(page.get("location") or location)
        files.extend(f for f in page["outputs"] if isinstance(f, dict))
        if len(page["outputs"]) < PAGE or len(files) >= int(page.get("total") or 0):
            return files, location


def download(session: Session, path: str, task: str, attempt: int, dst: Path) -> None:
    """One task's outputs of ``attempt``, as the master's archive, into ``dst/<task>/``."""
    resp = session.request("GET", f"{path}/archive", params={"task": task, "attempt": attempt}, stream=True,
                           timeout=DOWNLOAD_TIMEOUT)
    with tempfile.TemporaryFile() as buf:  # on disk, not in memory: outputs can be large
        for chunk in resp.iter_content(1 << 20):
            buf.write(chunk)
        buf.seek(0)
        dst.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=buf, mode="r:gz") as tar:
            tar.extractall(dst, filter="data")  # refuses absolute paths, ".." entries and links out of dst


def cmd_output(args: argparse.Namespace, job_path: Callable[[str, str], str],
               owner: Callable[[Session, argparse.Namespace], str]) -> int:
    """``job_path``, ``owner``: `det pai`'s (cli/pai.py, which registers this command)."""
    session = session_for(args)
    username = owner(session, args)
    path = f"{job_path(username, args.job)}/outputs"
    params: dict[str, Any] = {}
    if args.task:
        params["task"] = args.task
    if args.attempt:
        params["attempt"] = args.attempt
    files, location = list_outputs(session, path, params)
    what = f"task {args.task} of job {args.job}" if args.task else f"job {args.job}"
    if args.to is None:
        if args.json:
            print_json(files)
            return 0
        if not files:
            when = f" in attempt {args.attempt}" if args.attempt else ""
            print(f"{what[0].upper()}{what[1:]} kept no outputs{when} (a task's $PAI_OUTPUT_DIR is kept when it ends)")
            return 0
        rows = [[f.get("task"), f.get("attempt"), f.get("path"), render.format_size(int(f.get("size") or 0))]
                for f in files]
        print(render.table(["Task", "Attempt", "Path", "Size"], rows))
        print(f"\nKept at {location}", file=sys.stderr)
        return 0
    if not files:
        raise CliError(f"{what} kept no outputs{f' in attempt {args.attempt}' if args.attempt else ''}: "
                       "nothing to download")
    attempt = args.attempt or max(int(f["attempt"]) for f in files)
    tasks = sorted({str(f["task"]) for f in files if int(f["attempt"]) == attempt})
    dst = Path(args.to)
    for task in tasks:
        download(session, path, task, attempt, dst)
    count = sum(1 for f in files if int(f["attempt"]) == attempt)
    print(f"Downloaded {count} file{'s' if count != 1 else ''} of {what} (attempt {attempt}, "
          f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}) into {dst}")
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return int(text)


def add_parser(sub: argparse._SubParsersAction[Any], add_job: Callable[[argparse.ArgumentParser], None],
               job_path: Callable[[str, str], str], owner: Callable[[Session, argparse.Namespace], str]) -> None:
    p = sub.add_parser("output", aliases=["outputs"],
                       help="list what a job's tasks left in $PAI_OUTPUT_DIR, or download it (--to DIR)")
    add_job(p)
    p.add_argument("--task", type=task_arg, metavar="ROLE-INDEX", help="only this task's outputs, e.g. worker-0")
    p.add_argument("--attempt", type=_positive, metavar="N",
                   help="only this attempt's (default: every attempt's listed; the newest downloaded)")
    p.add_argument("--to", metavar="DIR", help="download them into DIR/<role>-<index>/... instead of listing them")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=functools.partial(cmd_output, job_path=job_path, owner=owner))
