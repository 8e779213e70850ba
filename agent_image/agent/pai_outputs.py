"""An OpenPAI task's ``$PAI_OUTPUT_DIR``: a directory of its own, and what it holds kept when it ends.

For a ``StartTask`` with ``collect_outputs`` the agent makes ``<task dir>/output``, owned by the task's
user, and the task sees it as ``$PAI_OUTPUT_DIR``: ``/run/determined/output`` in the sandbox (bound
read-write there), the host path for a task run as a plain process. It counts toward the task's disk
quota like its work dir. ``PAI_WORK_DIR`` is the task's working directory (its cwd).

When the task has ended, however it ended (exit, failure, a kill, the disk quota), and before its exit
is reported, the agent sends the directory's regular files to the master
(``POST /api/v1/allocations/{id}/outputs``, the allocation's token) as a tar stream
(``controlplane/pai/outputs.py``: symlinks never followed, at most 10,000 files and 1 GiB; what is
left out is said), and the master keeps them under the job in checkpoint storage. The task's log gets
one line saying what was kept, or why nothing was. Then the task directory is removed as always.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import quote

import requests

from controlplane.pai import outputs as out
from controlplane.wire.agent_protocol import StartTask

from .sandbox import WORKDIR, Mount

OUTPUT_DIR = "/run/determined/output"  # where a sandboxed task sees it
OUTPUT_NAME = "output"  # under the task directory
TIMEOUT = (10.0, 600.0)  # connect, then between bytes of the answer

log = logging.getLogger(__name__)


def host_dir(task_dir: Path) -> Path:
    return task_dir / OUTPUT_NAME


def prepare(msg: StartTask, task_dir: Path, owner: tuple[int, int] | None) -> Path | None:
    """Makes the task's output directory (given to ``owner``, the task's uid, where the agent drops
    root); None for a task that keeps no outputs."""
    if not msg.collect_outputs:
        return None
    path = host_dir(task_dir)
    path.mkdir(mode=0o755, exist_ok=True)
    if owner is not None:
        os.chown(path, *owner)
    return path


def mounts(msg: StartTask, task_dir: Path) -> list[Mount]:
    """The sandbox's read-write bind of the output directory at OUTPUT_DIR."""
    return [Mount(host_dir(task_dir), OUTPUT_DIR, writable=True)] if msg.collect_outputs else []


def task_env(msg: StartTask, task_dir: Path, sandboxed: bool) -> dict[str, str]:
    """PAI_WORK_DIR for every OpenPAI task; PAI_OUTPUT_DIR where it keeps outputs."""
    env: dict[str, str] = {}
    if msg.task_type == "PAI":
        env["PAI_WORK_DIR"] = WORKDIR if sandboxed else str(task_dir / "context")
    if msg.collect_outputs:
        env["PAI_OUTPUT_DIR"] = OUTPUT_DIR if sandboxed else str(host_dir(task_dir))
    return env


def keep(master_url: str, msg: StartTask, task_dir: Path) -> tuple[str, bool]:
    """Blocking: sends the directory to the master. (A line for the task's log, whether it is an error.)"""
    root = host_dir(task_dir)
    where = "$PAI_OUTPUT_DIR"
    try:
        found = out.scan(root)
    except OSError as e:
        return f"{where} could not be read ({e.strerror or e}): nothing kept", True
    cut = found.left_out_words()
    if not found.files:
        return f"{where} is empty{f' (left out: {cut})' if cut else ''}: nothing kept", bool(cut)
    url = f"{master_url.rstrip('/')}/api/v1/allocations/{quote(msg.allocation_id, safe='')}/outputs"
    headers = {"Grpc-Metadata-x-allocation-token": f"Bearer {msg.session_token}",
               "Content-Type": "application/x-tar"}
    try:
        resp = requests.post(url, data=out.tar_chunks(root, found), headers=headers,
                             params={"leftOut": cut[:1000]} if cut else None, timeout=TIMEOUT)
    except (requests.RequestException, OSError) as e:
        log.warning("%s: sending its outputs failed: %s", msg.allocation_id, e)
        return f"keeping {where} failed: the master could not be reached ({e}): nothing kept", True
    if resp.status_code != 200:
        try:
            why = str(resp.json().get("message") or resp.text)
        except ValueError:
            why = resp.text
        return f"keeping {where} failed: the master answered {resp.status_code}: {why[:500]}", True
    try:
        answer = resp.json()
    except ValueError:
        answer = {}
    name = msg.env.get("PAI_JOB_NAME", "")
    line = (f"kept {len(found.files)} file{'s' if len(found.files) != 1 else ''} "
            f"({out.size_words(found.total)}) of {where} at {answer.get('location', 'the job')}"
            + (f" (det pai output {name})" if name else ""))
    if cut:
        line += f"; left out: {cut}"
    return line, bool(cut)
