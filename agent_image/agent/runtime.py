"""Chooses how tasks run: under bubblewrap (the default) or, only when asked, as plain processes.

An agent that cannot build a sandbox refuses to start rather than silently running trial code
with its own rights; ``--task-runtime process`` is the explicit opt-out, and says what it costs.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .config import AgentConfig
from .sandbox import Sandbox, SandboxUnavailable, find_bwrap

log = logging.getLogger(__name__)

PROCESS_WARNING = (
    "--task-runtime process: tasks are NOT sandboxed. They run as this agent's user (uid {uid}), "
    "can read and write everything it can (its join token, its work dir, other tasks' files, the "
    "master's data dir and database on this host) and see every process. Install bubblewrap and "
    "drop --task-runtime process to isolate them."
)


class RuntimeRefused(SystemExit):
    """The agent must not start: no usable sandbox and no explicit opt-out."""


def hidden_paths(cfg: AgentConfig) -> tuple[Any, ...]:
    """What tasks must not see: the agent's work dir, its join token file, the --hide paths."""
    paths = [cfg.work_dir, *cfg.hide]
    if cfg.join_token_file is not None:
        paths.append(cfg.join_token_file)
    return tuple(dict.fromkeys(paths))


def task_sandbox(cfg: AgentConfig) -> Sandbox | None:
    """The sandbox tasks run in, None for ``--task-runtime process``; raises RuntimeRefused."""
    if cfg.task_runtime == "process":
        log.warning(PROCESS_WARNING.format(uid=os.geteuid()))
        return None
    bwrap = find_bwrap(cfg.bwrap)
    if bwrap is None:
        raise RuntimeRefused(
            f"det-agent: bubblewrap ({cfg.bwrap!r}) is not installed, so tasks cannot be sandboxed. "
            "Install it (apt-get install bubblewrap) or start with --task-runtime process to run tasks "
            "unconfined as this agent's user.")
    sandbox = Sandbox(bwrap, hidden_paths(cfg), tmpfs_size=tmpfs_size(cfg.task_disk_quota))
    try:
        sandbox.probe()
    except SandboxUnavailable as exc:
        raise RuntimeRefused(f"det-agent: cannot sandbox tasks: {exc}. Fix bubblewrap or start with "
                             "--task-runtime process to run tasks unconfined.") from exc
    log.info("tasks run under %s as uid %d, hiding %s", bwrap, sandbox.uid,
             ", ".join(str(p) for p in sandbox.hidden))
    return sandbox


def tmpfs_size(quota: int | None) -> int | None:
    """A task's /tmp and /dev/shm hold memory: its disk quota, but at most half the memory (the
    kernel's own default for a tmpfs)."""
    if quota is None:
        return None
    return min(quota, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2)
